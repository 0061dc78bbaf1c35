"""A feed writer for live runs that behave like Azure's: each record's Blob Storage event goes
to the hints queue at once (`HintPublisher`), while the record itself reaches the feed only
`delay_s` later (`--publish-delay`), released in batches every `RELEASE_EVERY_S`, as the
service appends its records minutes after their changes."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from processor.emulator.feed_writer import FeedWriter
from processor.emulator.hint_publisher import HintPublisher

RELEASE_EVERY_S = 3.0


class LiveFeedWriter(FeedWriter):
    """`FeedWriter` with hints published as records come, and records held back."""

    def __init__(
        self,
        *args: Any,
        delay_s: float = 0.0,
        hints: HintPublisher | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.delay_s, self.hints = delay_s, hints
        self._held: deque[tuple[float, int, dict[str, Any]]] = deque()  # (due, shard, record)
        self._released_at = 0.0

    async def add(self, shard: int, record: dict[str, Any]) -> None:
        if self.hints is not None:
            self.hints.publish(record)
        if self.delay_s <= 0:
            await super().add(shard, record)
        else:
            self._held.append((time.monotonic() + self.delay_s, shard, record))

    async def flush(self) -> None:
        """Release the held records that are due (at most every `RELEASE_EVERY_S`), then
        append what is queued."""
        now = time.monotonic()
        if self._held and now - self._released_at >= RELEASE_EVERY_S:
            self._released_at = now
            await self._release(now)
        await super().flush()

    async def finalize_segment(self, *, move_last_consumable: bool = True) -> None:
        """Every held record first: a segment is finalized with all of its records."""
        await self._release(float("inf"))
        await super().finalize_segment(move_last_consumable=move_last_consumable)

    async def drain(self) -> None:
        """Every held record, due or not, into the feed (a run that stops)."""
        await self._release(float("inf"))
        await super().flush()

    async def _release(self, now: float) -> None:
        while self._held and self._held[0][0] <= now:
            _, shard, record = self._held.popleft()
            await super().add(shard, record)

    @property
    def held(self) -> int:
        """Records made and not yet in the feed."""
        return len(self._held)
