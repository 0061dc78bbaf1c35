"""One look at the feed per poll interval for the whole host, instead of one per caught-up lease.

A lease that has read everything consumable can get nothing new before `lastConsumable` moves
(the service moves it when it finishes a segment, every few minutes to an hour). So caught-up
workers do not poll: they wait for this watcher, which reads `segments.json` once per poll
interval (one request while nothing moves, `FeedCatalog`) and wakes them all when the list of
consumable segments changed. A new segment reaches its first delivery within one poll interval.
"""

from __future__ import annotations

import asyncio

import structlog

from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.errors import FeedError
from processor.waiting import wait_any

log = structlog.get_logger("cfp.watcher")

# A host's catalog is refreshed by its watcher; anyone else uses the watcher's listing unless
# it is this many poll intervals old (the watcher failing, say).
CATALOG_AGE_POLLS = 3.0
# A caught-up worker still looks by itself this often (in poll intervals): a safety net that
# costs no request while the watcher keeps the catalog fresh.
WAKE_ANYWAY_POLLS = 12.0


class FeedWatcher:
    def __init__(self, catalog: FeedCatalog, *, every_s: float) -> None:
        self.catalog = catalog
        self.every_s = every_s
        self._changed = asyncio.Event()
        self.looks = 0

    def changed(self) -> asyncio.Event:
        """Set at the next change of the consumable segments (a fresh event after each)."""
        return self._changed

    async def run(self, stop: asyncio.Event) -> None:
        last: list[str] | None = None
        while True:
            try:
                segments = list(await self.catalog.segments(max_age_s=0))
                self.looks += 1
            except FeedError as e:  # the workers meet it too, and report it
                log.debug("watcher.failed", error=str(e))
            else:
                if last is not None and segments != last:
                    log.info("feed.changed", segments=len(segments), newest=segments[-1:])
                    self._changed.set()
                    self._changed = asyncio.Event()
                last = segments
            if await wait_any(stop, timeout_s=self.every_s):
                return
