"""Reading one lease's shard across segments, one step at a time, for its worker.

Each `read()` returns one of: a batch; "advanced" (the position moved without events: a segment
without this shard, or a shard finished; worth a checkpoint so other leases' barriers open);
"caught up" (nothing more exists now); or "blocked" (the next segment may not be entered yet
because other leases have not finished the segments before it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Protocol

from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.change_filter import ChangeFilter
from processor.changefeed.errors import FeedCorrupt
from processor.changefeed.selection import EventFilter
from processor.changefeed.shard_batch import DEFAULT_BATCH_EVENTS
from processor.changefeed.shard_reader import ShardReader, ShardReading
from processor.changefeed.storage.layout import segment_time, shard_name
from processor.reading.barrier import readable_segments
from processor.reading.lease_batch import LeaseBatch
from processor.reading.lease_position import LeasePosition


class Step(Enum):
    BATCH = "batch"
    ADVANCED = "advanced"
    CAUGHT_UP = "caught_up"
    BLOCKED = "blocked"


class Reader(Protocol):
    """What a worker reads a lease with: its shard (`LeaseReader`) or its scan partition.

    A `read()` must return within about a poll interval (caught up, or blocked, when there is
    nothing to hand out): the worker sees a hand-over request or a stop only between reads."""

    position: LeasePosition

    def reset(self) -> None: ...
    def bad_data_ahead(self) -> FeedCorrupt | None:
        """Bad data the reader already knows lies ahead of its position (None: none known)."""
        ...

    async def read(
        self,
        *,
        may_enter: Callable[[str, list[str]], bool],
        read_ahead: asyncio.TaskGroup | None = None,
        max_age_s: float | None = None,
    ) -> LeaseRead: ...


@dataclass(frozen=True, slots=True)
class LeaseRead:
    step: Step
    position: LeasePosition  # after this step
    batch: LeaseBatch | None = None
    waiting_for: str | None = None  # the segment a BLOCKED lease wants to enter


class LeaseReader:
    """Errors: `FeedCorrupt` subclasses for bad data (the position stays before it),
    `FeedUnavailable` when storage does not answer (call `reset()` before reading again)."""

    def __init__(
        self,
        catalog: FeedCatalog,
        *,
        shard: str,
        position: LeasePosition,
        batch_events: int = DEFAULT_BATCH_EVENTS,
        is_ordered: bool = True,
        change: ChangeFilter | None = None,
    ) -> None:
        self._catalog = catalog
        self.shard = shard
        self.position = position
        self._batch_events = batch_events
        self._is_ordered = is_ordered
        self._filter = EventFilter(change or ChangeFilter(), window=position.window)
        self._reader: ShardReader | None = None

    def bad_data_ahead(self) -> FeedCorrupt | None:
        return None if self._reader is None else self._reader.bad_data_ahead()

    def reset(self) -> None:
        """Stop read-ahead and forget reader state; the next read starts from `position`."""
        if self._reader is not None:
            self._reader.cancel_read_ahead()
        self._reader = None

    async def read(
        self,
        *,
        may_enter: Callable[[str, list[str]], bool],
        read_ahead: asyncio.TaskGroup | None = None,
        max_age_s: float | None = None,
    ) -> LeaseRead:
        pos = self.position
        if pos.segment is None or pos.is_segment_done:
            segments = await self._catalog.segments(max_age_s=max_age_s)
            after = pos.segment or ""
            following = [s for s in readable_segments(segments, pos) if s > after]
            if not following:
                if not pos.finished and _past_the_end(pos, segments):
                    self.position = pos = replace(pos, finished=True)
                return LeaseRead(Step.CAUGHT_UP, pos)
            nxt = following[0]
            if self._is_ordered and not may_enter(nxt, segments):
                return LeaseRead(Step.BLOCKED, pos, waiting_for=nxt)
            manifest = await self._catalog.manifest(nxt)
            if self._prefix(manifest.shard_prefixes) is None:
                self.position = pos.moved_to(nxt, True)
            else:
                self.position = pos.moved_to(nxt, False)
            self._reader = None
            return LeaseRead(Step.ADVANCED, self.position)
        assert pos.segment is not None
        manifest = await self._catalog.manifest(pos.segment)
        prefix = self._prefix(manifest.shard_prefixes)
        if prefix is None:
            self.position = pos.moved_to(pos.segment, True)
            return LeaseRead(Step.ADVANCED, self.position)
        if self._reader is None:
            self._reader = ShardReader(
                self._catalog.storage,
                segment=pos.segment,
                prefix=prefix,
                position=pos.shard,
                how=ShardReading(self._filter, batch_events=self._batch_events),
            )
        result = await self._reader.read(is_finalized=manifest.is_finalized, read_ahead=read_ahead)
        if result.batch is not None:
            self.position = pos.moved_to(pos.segment, False, result.batch.end)
            return LeaseRead(Step.BATCH, self.position, batch=LeaseBatch.of_shard(result.batch))
        if result.is_complete:
            self.position = pos.moved_to(pos.segment, True)
            self._reader = None
            return LeaseRead(Step.ADVANCED, self.position)
        # caught up inside a Publishing segment: keep the reader's shard position
        self.position = pos.moved_to(pos.segment, False, self._reader.position)
        return LeaseRead(Step.CAUGHT_UP, self.position)

    def _prefix(self, prefixes: tuple[str, ...]) -> str | None:
        return next((p for p in prefixes if shard_name(p) == self.shard), None)


def _past_the_end(position: LeasePosition, segments: list[str]) -> bool:
    """Whether a lease with nothing left to read before its end time is finished for good: a
    consumable segment lies wholly after its end (later ones can only lie further)."""
    window = position.window
    return window.end is not None and any(window.is_past(segment_time(s)) for s in segments)
