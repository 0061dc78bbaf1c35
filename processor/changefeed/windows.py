"""The bytes a shard reader holds of one chunk (`Window`), and the one ranged GET it may have
running ahead of itself (`ReadAhead`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from processor.changefeed.avro_chunk import BlockScan, ChunkHeader
from processor.changefeed.decode import BlockDecoder
from processor.changefeed.position import ShardPosition
from processor.changefeed.storage import FeedStorage


@dataclass(slots=True)
class Window:
    """Fetched bytes of one chunk, their complete blocks, and how far they were handed out.

    The next record to hand out is record `within` of block `next`; `cursor` is its file offset
    once known (None: decode that block from its start).
    """

    chunk: str
    header: ChunkHeader
    buf: bytes
    base: int  # file offset of buf[0]
    start: int  # file offset the window was read for (the first block, or a sync marker)
    fetched_end: int
    scan: BlockScan
    decoder: BlockDecoder
    next: int = 0
    within: int = 0
    cursor: int | None = None

    @property
    def is_used_up(self) -> bool:
        return self.next == len(self.scan.blocks)

    def matches(self, pos: ShardPosition) -> bool:
        """Whether `pos` is where this window's next record (or its end) stands."""
        if pos.chunk != self.chunk:
            return False
        if self.next == 0 and self.within == 0:
            return pos.block_offset == self.start and pos.event_index == 0
        if self.is_used_up:
            return pos.block_offset == self.scan.end and pos.event_index == 0
        block = self.scan.blocks[self.next]
        return pos.block_offset == block.offset and pos.event_index == self.within


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
