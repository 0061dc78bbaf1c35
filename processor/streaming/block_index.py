"""The blocks of the chunks a stream's driver must count (for an event or byte limit, and for
the tail of a chunk still being written), scanned from downloaded bytes without decoding them,
and kept: each byte is scanned once however many micro-batches look at it."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from processor.changefeed.decoding.avro_chunk import (
    BlockSpan,
    ChunkHeader,
    scan_blocks,
)
from processor.changefeed.decoding.avro_chunk import read_header as read_chunk_header
from processor.changefeed.errors import TruncatedBlockError
from processor.changefeed.storage.feed_storage import FeedStorage

SCAN_BYTES = 4 << 20
CACHED_CHUNKS = 512


@dataclass(slots=True)
class ChunkBlocks:
    """Whole blocks of one chunk from `start` on, as far as `scanned_to`."""

    header: ChunkHeader
    start: int
    scanned_to: int
    blocks: list[BlockSpan] = field(default_factory=list)


async def read_header(storage: FeedStorage, chunk: str, size: int) -> ChunkHeader:
    """A chunk's header, read in as many ranges as it takes (`size`: the blob's)."""
    return await read_chunk_header(
        lambda n: storage.read_range(chunk, 0, n), chunk=chunk, blob_size=size
    )


class BlockIndex:
    def __init__(self, storage: FeedStorage, *, scan_bytes: int = SCAN_BYTES) -> None:
        self._storage = storage
        self._scan_bytes = scan_bytes
        self._chunks: OrderedDict[str, ChunkBlocks] = OrderedDict()

    async def blocks(
        self, chunk: str, *, start: int, upto: int, size: int, is_final: bool
    ) -> ChunkBlocks:
        """The chunk's whole blocks from `start` (0: its first block) until at least `upto`
        bytes or the chunk's `size` are scanned. Errors: `FeedCorrupt` subclasses naming the
        chunk and byte offset (bad framing; a torn last block when `is_final`)."""
        known = self._chunks.get(chunk)
        if known is None or start < known.start or start > known.scanned_to:
            header = known.header if known else await read_header(self._storage, chunk, size)
            first = max(start, header.size)
            known = ChunkBlocks(header, first, first)
            self._chunks[chunk] = known
        self._chunks.move_to_end(chunk)
        while len(self._chunks) > CACHED_CHUNKS:
            self._chunks.popitem(last=False)
        await self._scan(chunk, known, min(upto, size), size, is_final)
        return known

    async def _scan(
        self, chunk: str, known: ChunkBlocks, upto: int, size: int, is_final: bool
    ) -> None:
        length = self._scan_bytes
        while known.scanned_to < upto:
            at = known.scanned_to
            buf = await self._storage.read_range(chunk, at, min(length, size - at))
            scan = scan_blocks(buf, base=at, sync=known.header.sync, chunk=chunk)
            known.blocks.extend(scan.blocks)
            known.scanned_to = scan.end
            if scan.error is not None:
                raise scan.error
            if scan.is_torn and not scan.blocks:
                if at + len(buf) < size:
                    length *= 2  # a block larger than the read
                    continue
                if is_final:
                    raise TruncatedBlockError(
                        chunk,
                        at,
                        f"chunk of a finalized segment ends inside a block ({size} bytes)",
                    )
                return  # its last block is still being written
