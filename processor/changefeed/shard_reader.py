"""Reading one shard of one segment from a position, as far as complete blocks exist now.

Driven by whoever owns the shard (the whole-feed reader, or a host's worker for one lease),
one `read()` at a time. Each call re-lists the shard prefix when the known bytes are used up,
so new chunks and grown chunks are found; a trailing block that is not complete yet is left
for a later call and the position never moves past it.
"""

from __future__ import annotations

from dataclasses import dataclass

from processor.changefeed.avro_chunk import (
    BlockSpan,
    ChunkHeader,
    NeedMoreBytes,
    header_or_truncated,
    scan_blocks,
)
from processor.changefeed.decode import decode_blocks
from processor.changefeed.errors import (
    FeedCorrupt,
    MissingChunkError,
    PositionError,
    TruncatedBlockError,
)
from processor.changefeed.layout import chunk_shard_prefix
from processor.changefeed.position import RawRecord, ShardBatch, ShardPosition
from processor.changefeed.selection import EventFilter
from processor.changefeed.storage import BlobInfo, FeedStorage

DEFAULT_READ_SIZE = 8 << 20
HEADER_PROBE = 4096


@dataclass(frozen=True, slots=True)
class ShardRead:
    """The outcome of one `ShardReader.read()`.

    `batch` is None when nothing new was available. `is_caught_up` says every byte that exists
    now was read; `is_complete` says the shard will never have more (its segment was finalized
    before the listing that found nothing more).
    """

    batch: ShardBatch | None
    is_caught_up: bool
    is_complete: bool


class ShardReader:
    """One shard prefix of one segment.

    Errors: `FeedCorrupt` subclasses for bad bytes (the position stays in front of them; blocks
    before a bad block are returned first and the error is raised by the next call),
    `FeedUnavailable` when storage does not answer.
    """

    def __init__(
        self,
        storage: FeedStorage,
        *,
        segment: str,
        prefix: str,
        position: ShardPosition | None = None,
        event_filter: EventFilter | None = None,
        read_size: int = DEFAULT_READ_SIZE,
    ) -> None:
        self._storage = storage
        self.segment = segment
        self.prefix = prefix
        self.position = position or ShardPosition()
        if self.position.chunk is not None and chunk_shard_prefix(self.position.chunk) != prefix:
            raise PositionError(self.position.chunk, 0, f"position is not in shard {prefix}")
        self._filter = event_filter or EventFilter(include_control=True)
        self._read_size = read_size
        self._chunks: list[BlobInfo] | None = None
        self._headers: dict[str, ChunkHeader] = {}
        self._pending: FeedCorrupt | None = None

    async def read(self, *, is_finalized: bool) -> ShardRead:
        """Return the next batch of complete blocks, or report that none is available.

        `is_finalized` must have been observed before this call: completion is only concluded
        from a listing made after it.
        """
        if self._pending is not None:
            raise self._pending
        relisted = False
        while True:
            if self._chunks is None:
                self._chunks = await self._storage.list_blobs(self.prefix)
                relisted = True
            chunks = self._chunks
            pos = self.position
            if pos.chunk is None:
                if not chunks:
                    if relisted:
                        return ShardRead(None, True, is_finalized)
                    self._chunks = None
                    continue
                self.position = pos = ShardPosition(chunks[0].name, 0, 0)
            idx = next((i for i, c in enumerate(chunks) if c.name == pos.chunk), None)
            if idx is None:
                if relisted:
                    raise MissingChunkError(pos.chunk or "", "chunk of the saved position is gone")
                self._chunks = None
                continue
            info = chunks[idx]
            if pos.block_offset == 0 and info.size > 0:
                header = await self._header(info)
                self.position = pos = ShardPosition(info.name, header.size, 0)
            if pos.block_offset > info.size:
                if relisted:
                    raise PositionError(
                        info.name, pos.block_offset, f"position is past the end ({info.size})"
                    )
                self._chunks = None
                continue
            if info.size in (pos.block_offset, 0):
                if idx + 1 < len(chunks):
                    self.position = ShardPosition(chunks[idx + 1].name, 0, 0)
                    continue
                if relisted:
                    return ShardRead(None, True, is_finalized)
                self._chunks = None
                continue
            before = self.position
            batch = await self._read_blocks(info, is_final=relisted and is_finalized)
            if batch is not None:
                self.position = batch.end
                return ShardRead(batch, False, False)
            if self.position != before:
                continue  # only a trailing sync marker was left: now at the chunk's end
            if relisted:
                return ShardRead(None, True, False)
            self._chunks = None

    async def _header(self, info: BlobInfo) -> ChunkHeader:
        cached = self._headers.get(info.name)
        if cached is not None:
            return cached
        want = min(info.size, HEADER_PROBE)
        while True:
            buf = await self._storage.read_range(info.name, 0, want)
            try:
                header = header_or_truncated(buf, chunk=info.name, blob_size=info.size)
            except NeedMoreBytes as e:
                want = min(info.size, max(e.needed, 2 * want))
                continue
            if len(self._headers) > 16:
                self._headers.clear()
            self._headers[info.name] = header
            return header

    async def _read_blocks(self, info: BlobInfo, *, is_final: bool) -> ShardBatch | None:
        """Complete blocks of `info` from the position; None when the next block is not whole."""
        pos = self.position
        header = await self._header(info)
        start = pos.block_offset
        length = min(self._read_size, info.size - start)
        while True:
            buf = await self._storage.read_range(info.name, start, length)
            scan = scan_blocks(buf, base=start, sync=header.sync, chunk=info.name)
            if scan.blocks or start + len(buf) >= info.size:
                break
            length = min(2 * length, info.size - start)  # one block is larger than the read
        if not scan.blocks:
            if not scan.is_torn:
                self.position = ShardPosition(info.name, scan.end, 0)
                return None
            if is_final and scan.is_torn:
                raise TruncatedBlockError(
                    info.name,
                    scan.end,
                    f"chunk of a finalized segment ends inside a block ({info.size} bytes)",
                )
            return None
        first = scan.blocks[0]
        if pos.event_index >= first.count:
            raise PositionError(
                info.name,
                first.offset,
                f"event index {pos.event_index} but the block holds {first.count}",
            )
        start_pos = ShardPosition(info.name, first.offset, pos.event_index)
        decoded = decode_blocks(
            buf,
            base=start,
            blocks=scan.blocks,
            skip=pos.event_index,
            header=header,
            chunk=info.name,
        )
        if decoded.error is not None:
            if not decoded.blocks:
                raise decoded.error
            self._pending = decoded.error
        return self._batch(info.name, start_pos, decoded.blocks, decoded.records)

    def _batch(
        self,
        chunk: str,
        start: ShardPosition,
        blocks: tuple[BlockSpan, ...],
        records: list[RawRecord],
    ) -> ShardBatch:
        accept = self._filter.accepts
        if self._filter.is_trivial:
            kept, raw_index = records, list(range(len(records)))
        else:
            raw_index = [i for i, r in enumerate(records) if accept(r)]
            kept = [records[i] for i in raw_index]
        return ShardBatch(
            segment=self.segment,
            shard=self.prefix,
            chunk=chunk,
            start=start,
            end=ShardPosition(chunk, blocks[-1].end, 0),
            blocks=blocks,
            records=kept,
            raw_index=raw_index,
        )
