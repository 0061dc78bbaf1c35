"""Sampling each owned lease's byte lag (`cfp_lag_bytes`, `/status`) every few seconds.

The estimate is the one `cfp status` makes (blob sizes of what is left up to lastConsumable),
so it costs listings: it runs on its own schedule, never inside a worker's read loop, and keeps
the listings of finalized segments (which never change) until every lease is past them.
"""

from __future__ import annotations

import asyncio

import structlog

from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.errors import FeedError, InvalidContinuation
from processor.host.health.lease_recorder import LeaseRecorder
from processor.reading.backlog import ListingCache, bytes_left
from processor.reading.lease_position import LeasePosition, is_scan_token
from processor.waiting import wait_any

log = structlog.get_logger("cfp.lag")

LAG_SAMPLE_S = 10.0


async def sample_lag(
    progress: LeaseRecorder, catalog: FeedCatalog, stop: asyncio.Event, *, every_s: float
) -> None:
    """Refresh `bytes_left` of every lease in `progress` until `stop` is set."""
    cache: ListingCache = {}
    while not await wait_any(stop, timeout_s=every_s):
        try:
            segments = await catalog.segments()
        except FeedError:
            continue  # the workers report the feed's problems; nothing to estimate now
        _forget_behind(cache, progress)
        for entry in list(progress.entries.values()):
            if entry.caught_up:
                entry.bytes_left = 0
                continue
            try:
                pos = LeasePosition.from_json(entry.continuation, lease=entry.token)
                entry.bytes_left = await bytes_left(catalog, entry.token, pos, segments, cache)
            except (FeedError, InvalidContinuation) as e:
                log.debug("lag.unknown", lease=entry.token, error=str(e))
                entry.bytes_left = None


def _forget_behind(cache: ListingCache, progress: LeaseRecorder) -> None:
    """Drop listings of segments every lease of this host is past (or all, with no lease)."""
    segments = []
    for entry in progress.entries.values():
        if is_scan_token(entry.token):
            continue  # a scan partition reads no segment
        try:
            segments.append(LeasePosition.from_json(entry.continuation, lease=entry.token).segment)
        except InvalidContinuation:
            return
    oldest = min((s or "" for s in segments), default=None)
    for key in [k for k in cache if oldest is None or k[0] < oldest]:
        del cache[key]
