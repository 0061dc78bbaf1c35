"""Fetching a shard's chunk bytes as windows of whole blocks, with the next range read ahead.

The reader decides where to read; this decides how: the header first (cached, and kept when a
read-ahead brought the chunk's whole start), then a ranged GET grown until a block fits, then
one read-ahead of whatever comes next while the window is decoded.
"""

from __future__ import annotations

import asyncio

from processor.changefeed.decoding.avro_chunk import (
    ChunkHeader,
    read_header,
    scan_blocks,
)
from processor.changefeed.storage.feed_storage import BlobInfo, FeedStorage
from processor.changefeed.windows import ReadAhead, Window

CACHED_HEADERS = 16
HEADER_ROOM = 64 << 10  # bytes read for a chunk's header, before its first window's


class WindowFetcher:
    """The byte fetching of one `ShardReader`: called once per window, and for each chunk's
    header when the reader steps into it.

    Errors: whatever `FeedStorage` raises, and `FeedCorrupt` subclasses for a bad header.
    """

    def __init__(self, storage: FeedStorage, *, read_size: int) -> None:
        self._storage = storage
        self._read_size = read_size
        self._ahead = ReadAhead(storage)
        # chunk bytes from offset 0 that a read-ahead brought with the header: the first window's
        self._spare: tuple[str, bytes] | None = None
        self._headers: dict[str, ChunkHeader] = {}

    def cancel_read_ahead(self) -> None:
        self._ahead.cancel()

    async def header(self, info: BlobInfo) -> ChunkHeader:
        """The chunk's header, read in as many ranges as it takes."""
        cached = self._headers.get(info.name)
        if cached is not None:
            return cached
        first = True

        async def start(want: int) -> bytes:
            nonlocal first
            if not first:
                return await self._storage.read_range(info.name, 0, want)
            first = False
            # the first window's bytes come with the header's, in one GET: a header is a few
            # KiB, so this reads the window the reader asks for next, whatever its offset
            whole = min(info.size, HEADER_ROOM + self._read_size)
            buf = await self._ahead.read(info.name, 0, max(want, whole))
            self._spare = (info.name, buf)  # the chunk's start: the first window's bytes
            return buf

        header = await read_header(start, chunk=info.name, blob_size=info.size)
        if len(self._headers) > CACHED_HEADERS:
            self._headers.clear()
        self._headers[info.name] = header
        return header

    async def fetch(
        self,
        info: BlobInfo,
        start: int,
        *,
        following: BlobInfo | None,
        read_ahead: asyncio.TaskGroup | None,
    ) -> Window:
        """Fetch bytes from `start` (growing the range until a whole block is in it), then start
        reading ahead in `read_ahead`: the rest of this chunk, or `following` (the next chunk
        of the listing) from its first byte."""
        header = await self.header(info)
        length = min(self._read_size, info.size - start)
        spare, self._spare = self._spare, None
        if spare is not None and spare[0] == info.name and start < len(spare[1]):
            buf, base = spare[1], 0
        else:
            buf, base = await self._ahead.read(info.name, start, length), start
        while True:
            # never more than `length` from `start`, as a GET of its own would have brought:
            # where windows end decides where batches end
            end = min(base + len(buf), start + length)
            view = memoryview(buf)[start - base : end - base]
            scan = scan_blocks(view, base=start, sync=header.sync, chunk=info.name)
            if scan.blocks or end >= info.size or scan.error is not None:
                break
            length = min(2 * (end - start), info.size - start)  # a block larger than the read
            buf, base = await self._storage.read_range(info.name, start, length), start
        window = Window(info.name, header, buf, base, start, end, scan)
        if window.fetched_end < info.size:
            nxt = window.scan.end
            self._ahead.start(read_ahead, info.name, nxt, min(self._read_size, info.size - nxt))
        elif following is not None:
            size = min(self._read_size, following.size)
            self._ahead.start(read_ahead, following.name, 0, size)
        return window
