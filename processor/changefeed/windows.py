"""The bytes a shard reader holds of one chunk (`Window`) and the batches it hands out of them,
and the one ranged GET it may have running ahead of itself (`ReadAhead`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from processor.changefeed.decoding.avro_chunk import BlockScan, BlockSpan, ChunkHeader
from processor.changefeed.decoding.columnar import DecodedWindow, freed_columns
from processor.changefeed.errors import FeedCorrupt
from processor.changefeed.position import ShardPosition
from processor.changefeed.shard_batch import ShardBatch
from processor.changefeed.storage.feed_storage import FeedStorage


@dataclass(slots=True)
class Window:
    """Fetched bytes of one chunk, their complete blocks, and how far they were handed out.

    The next record to hand out is record `within` of block `next`. The window is decoded
    whole, once, when its first batch is taken (`decoded`); `blocks` are then those that
    decoded, and `error` the bad data after them (bad framing is known from the scan).
    """

    chunk: str
    header: ChunkHeader
    buf: bytes
    base: int  # file offset of buf[0]
    start: int  # file offset the window was read for (the first block, or a sync marker)
    fetched_end: int
    scan: BlockScan
    blocks: tuple[BlockSpan, ...] = ()
    error: FeedCorrupt | None = None
    decoded: DecodedWindow | None = None
    next: int = 0
    within: int = 0

    def __post_init__(self) -> None:
        self.blocks, self.error = self.scan.blocks, self.scan.error

    def decoded_as(self, decoded: DecodedWindow) -> DecodedWindow:
        """Keep the window's decode (its bytes are needed no more); a bad block cuts `blocks`
        short and becomes `error`."""
        self.decoded, self.buf = decoded, b""
        if decoded.error is not None:
            self.blocks, self.error = decoded.blocks, decoded.error
        return decoded

    @property
    def is_used_up(self) -> bool:
        return self.next == len(self.blocks)

    def matches(self, pos: ShardPosition) -> bool:
        """Whether `pos` is where this window's next record (or its end) stands."""
        if pos.chunk != self.chunk:
            return False
        if self.next == 0 and self.within == 0:
            return pos.block_offset == self.start and pos.event_index == 0
        if self.is_used_up:
            end = self.blocks[-1].end if self.blocks else self.scan.end
            return pos.block_offset == end and pos.event_index == 0
        block = self.blocks[self.next]
        return pos.block_offset == block.offset and pos.event_index == self.within

    def take(self, limit: int, *, segment: str, shard: str) -> ShardBatch:
        """The next `limit` records (at least one) of the decoded window: a slice of its
        columns, filtered, with their position columns; the window moves past them."""
        decoded = self.decoded
        assert decoded is not None
        starts = decoded.starts
        first_row = int(starts[self.next]) + self.within
        stop_row = min(first_row + limit, int(starts[len(self.blocks)]))
        last = int(np.searchsorted(starts, stop_row - 1, side="right")) - 1
        blocks = self.blocks[self.next : last + 1]
        start = ShardPosition(self.chunk, blocks[0].offset, self.within)
        if stop_row == starts[last + 1]:
            self.next, self.within = last + 1, 0
            end = ShardPosition(self.chunk, blocks[-1].end, 0)
        else:
            self.next, self.within = last, stop_row - int(starts[last])
            end = ShardPosition(self.chunk, blocks[-1].offset, self.within)
        table = decoded.table.slice(first_row, stop_row - first_row)
        offsets, indexes = decoded.rows(first_row, stop_row)
        raw_count = stop_row - first_row
        window_json = decoded.json
        first_kept, kept = first_row, raw_count
        if decoded.keep is not None and decoded.kept_before is not None:
            chosen = decoded.keep[first_row:stop_row]
            offsets, indexes = offsets[chosen], indexes[chosen]
            first_kept = int(decoded.kept_before[first_row])
            kept = int(decoded.kept_before[stop_row]) - first_kept
            # a window that kept its lines only has no columns to filter: their count will do
            table = freed_columns(kept) if decoded.has_lines else table.filter(pa.array(chosen))

        def json_of_rows() -> pa.Array:
            return window_json().slice(first_kept, kept)

        def lines_of_rows(count: int) -> bytes | memoryview:
            return decoded.line_bytes(first_kept, first_kept + min(count, kept))

        return ShardBatch(
            segment=segment,
            shard=shard,
            chunk=self.chunk,
            start=start,
            end=end,
            blocks=blocks,
            table=table,
            offsets=offsets,
            indexes=indexes,
            raw_count=raw_count,
            json_of_rows=None if decoded.has_lines else json_of_rows,
            lines_of_rows=lines_of_rows if decoded.has_lines else None,
        )


class ReadAhead:
    """At most one ranged GET running ahead of the reader, in a task group the caller owns.

    A failed read-ahead is kept as its result and raised only if its bytes are asked for.
    """

    def __init__(self, storage: FeedStorage) -> None:
        self._storage = storage
        self._key: tuple[str, int] | None = None
        self._task: asyncio.Task[bytes | Exception] | None = None

    def start(self, group: asyncio.TaskGroup | None, path: str, offset: int, length: int) -> None:
        if group is None or length <= 0 or self._key == (path, offset):
            return
        self.cancel()

        async def fetch() -> bytes | Exception:
            try:
                return await self._storage.read_range(path, offset, length)
            except Exception as e:  # handed to whoever asks for these bytes
                return e

        self._key, self._task = (path, offset), group.create_task(fetch())

    def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._key = self._task = None

    async def read(self, path: str, offset: int, length: int) -> bytes:
        """The read-ahead's bytes when it was for (path, offset), else a fresh ranged GET."""
        task = self._task
        if task is not None and self._key == (path, offset):
            self._key = self._task = None
            try:
                result = await task
            except asyncio.CancelledError:
                if task.cancelled() and not _current_task_cancelling():
                    return await self._storage.read_range(path, offset, length)
                raise
            if isinstance(result, Exception):
                raise result
            return result
        self.cancel()
        return await self._storage.read_range(path, offset, length)


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
