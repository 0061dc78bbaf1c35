"""Reading one shard of one segment from a position, as far as complete blocks exist now.

Driven by whoever owns the shard (the whole-feed reader, or a host's worker for one lease),
one `read()` at a time. Each call re-lists the shard prefix when the known bytes are used up,
so new chunks and grown chunks are found; a trailing block that is not complete yet is left
for a later call and the position never moves past it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from processor.changefeed.decoding.columnar import DecodedWindow, decode_window
from processor.changefeed.decoding.window_lines import decode_lines
from processor.changefeed.errors import (
    FeedCorrupt,
    FeedError,
    MissingChunkError,
    PositionError,
    TruncatedBlockError,
)
from processor.changefeed.position import ShardPosition
from processor.changefeed.selection import EventFilter
from processor.changefeed.shard_batch import DEFAULT_BATCH_EVENTS, ShardBatch
from processor.changefeed.storage.feed_storage import BlobInfo, FeedStorage
from processor.changefeed.storage.layout import (
    DEFAULT_READ_SIZE,
    chunk_number,
    chunk_path,
    chunk_shard_prefix,
)
from processor.changefeed.window_fetcher import WindowFetcher
from processor.changefeed.windows import Window


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


def first_missing_chunk(before: str | None, after: str) -> int | None:
    """The number of the first chunk missing between `before` (None: the shard's start) and
    `after`, listed next to each other; None when there is no gap.

    Chunks are numbered from 00000 without gaps: a missing number is data gone (retention or
    deletion), never to be stepped over silently.
    """
    try:
        expected = 0 if before is None else chunk_number(before) + 1
        return None if chunk_number(after) == expected else expected
    except ValueError:
        return None  # not a chunk name we know how to number: nothing to compare


@dataclass(frozen=True, slots=True)
class ShardReading:
    """How a shard is read: which records it keeps (None: every one, `Control` too), the largest
    ranged GET, the most events a batch holds, and whether each window's JSON lines are made in
    its decode's thread, keeping nothing else of its records (`cfp read` prints them from the
    loop)."""

    event_filter: EventFilter | None = None
    read_size: int = DEFAULT_READ_SIZE
    batch_events: int = DEFAULT_BATCH_EVENTS
    with_json: bool = False


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
        how: ShardReading | None = None,
    ) -> None:
        how = how or ShardReading()
        self._storage = storage
        self._with_json = how.with_json
        self.segment = segment
        self.prefix = prefix
        self.position = position or ShardPosition()
        if self.position.chunk is not None and chunk_shard_prefix(self.position.chunk) != prefix:
            raise PositionError(self.position.chunk, 0, f"position is not in shard {prefix}")
        self._filter = how.event_filter or EventFilter(include_control=True)
        self._batch_events = how.batch_events
        self._window: Window | None = None
        self._fetcher = WindowFetcher(storage, read_size=how.read_size)
        self._group: asyncio.TaskGroup | None = None
        self._chunks: list[BlobInfo] | None = None
        # `_chunks` was listed after the segment was finalized: the shard's last word, which
        # needs no second listing to say that the shard is complete
        self._listed_finalized = False

    def cancel_read_ahead(self) -> None:
        self._fetcher.cancel_read_ahead()

    def bad_data_ahead(self) -> FeedCorrupt | None:
        """The bad data (a damaged block, bad framing) the bytes in hand show ahead of the
        position, before any read meets it: whoever reads on from here would only meet it too."""
        w = self._window
        return w.error if w is not None and w.matches(self.position) else None

    async def prefetch(self, *, is_finalized: bool) -> None:
        """List the shard and fetch its first chunk's header with the first window's bytes,
        before the first `read()`: what a reader of the segment before does meanwhile. Only from
        a shard's start. Best effort: an error is left for `read()` to meet again.

        `is_finalized` must have been observed before this call, as for `read()`."""
        if self.position.chunk is not None or self._chunks is not None:
            return
        with contextlib.suppress(FeedError):
            chunks = await self._storage.list_blobs(self.prefix)
            self._chunks, self._listed_finalized = chunks, is_finalized
            if chunks and chunks[0].size > 0:
                await self._fetcher.header(chunks[0])

    async def read(
        self, *, is_finalized: bool, read_ahead: asyncio.TaskGroup | None = None
    ) -> ShardRead:
        """Return the next batch of complete blocks, or report that none is available.

        `is_finalized` must have been observed before this call: completion is only concluded
        from a listing made after it. With `read_ahead`, the next ranged GET of this shard is
        started in that group while the current bytes are decoded and handed out.
        """
        self._group = read_ahead
        relisted = self._listed_finalized and is_finalized  # no chunk is added or grows after
        while True:
            if self._chunks is None:
                self._chunks = await self._storage.list_blobs(self.prefix)
                self._listed_finalized = is_finalized
                relisted = True
            chunks = self._chunks
            pos = self.position
            if pos.chunk is None:
                if not chunks:
                    if relisted:
                        return ShardRead(None, True, is_finalized)
                    self._chunks = None
                    continue
                self._step_into(None, chunks[0].name, relisted=relisted)
                continue
            idx = next((i for i, c in enumerate(chunks) if c.name == pos.chunk), None)
            if idx is None:
                if relisted:
                    raise MissingChunkError(pos.chunk or "", "chunk of the saved position is gone")
                self._chunks = None
                continue
            info = chunks[idx]
            pos = await self._past_header(info)
            if pos.block_offset > info.size:
                if relisted:
                    raise PositionError(
                        info.name, pos.block_offset, f"position is past the end ({info.size})"
                    )
                self._chunks = None
                continue
            if info.size in (pos.block_offset, 0):
                if idx + 1 < len(chunks):
                    self._step_into(info.name, chunks[idx + 1].name, relisted=relisted)
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

    async def _past_header(self, info: BlobInfo) -> ShardPosition:
        """The position, moved past the chunk's header when it pointed at the chunk's start."""
        if self.position.block_offset == 0 and info.size > 0:
            header = await self._fetcher.header(info)
            self.position = ShardPosition(info.name, header.size, 0)
        return self.position

    def _step_into(self, before: str | None, after: str, *, relisted: bool) -> None:
        """Move the position to the start of chunk `after`, listed right after `before`. A gap
        between them is judged on a fresh listing only: a stale one is dropped, to list again.

        Raises:
            MissingChunkError: naming the first missing chunk, on a fresh listing.
        """
        missing = first_missing_chunk(before, after)
        if missing is None:
            self.position = ShardPosition(after, 0, 0)
        elif not relisted:
            self._chunks = None
        else:
            raise MissingChunkError(
                chunk_path(self.prefix, missing), f"chunk is missing before {after} (retention?)"
            )

    async def _read_blocks(self, info: BlobInfo, *, is_final: bool) -> ShardBatch | None:
        """Records of complete blocks of `info` from the position; None when none is whole yet.

        Bytes are fetched in ranges of up to `read_size` and kept in a window, which is decoded
        whole into Arrow columns (in a thread: the event loop renews leases meanwhile); each
        call hands out the next `batch_events` records of it, a slice of those columns."""
        pos = self.position
        w = self._window
        if w is None or not w.matches(pos):
            w = self._window = await self._fetch(info, pos.block_offset)
            if w.blocks and pos.event_index:
                if pos.event_index >= w.blocks[0].count:
                    raise PositionError(
                        info.name,
                        w.blocks[0].offset,
                        f"event index {pos.event_index} but the block holds {w.blocks[0].count}",
                    )
                w.within = pos.event_index
        if not w.is_used_up and w.decoded is None:
            try:
                w.decoded_as(await asyncio.to_thread(self._decode, w))
            except asyncio.CancelledError:
                self._window = None  # the thread may still be decoding it: fetch it again
                raise
        if w.is_used_up:
            if w.error is not None:
                raise w.error
            if not w.scan.is_torn:
                self.position = ShardPosition(info.name, w.scan.end, 0)
                self._window = None
                if w.scan.end < info.size:  # handed out whole: the next window, in this call
                    return await self._read_blocks(info, is_final=is_final)
                return None
            if w.fetched_end < info.size:  # the window ended inside a block that is whole now
                self._window = await self._fetch(info, w.scan.end)
                return await self._read_blocks(info, is_final=is_final)
            if is_final:
                raise TruncatedBlockError(
                    info.name,
                    w.scan.end,
                    f"chunk of a finalized segment ends inside a block ({info.size} bytes)",
                )
            self._window = None
            return None
        # bad data after the good blocks fails the next read
        return w.take(self._batch_events, segment=self.segment, shard=self.prefix)

    def _decode(self, w: Window) -> DecodedWindow:
        """The window's records as columns, the filter's verdicts on them, and (when asked
        for) their JSON: all off the event loop, in one go per window."""
        if self._with_json:  # only the lines are kept: made a piece at a time
            return decode_lines(
                w.buf, base=w.base, blocks=w.blocks, header=w.header, chunk=w.chunk,
                rows=self._filter.rows,
            )  # fmt: skip
        decoded = decode_window(w.buf, base=w.base, blocks=w.blocks, header=w.header, chunk=w.chunk)
        decoded.keep_only(self._filter.rows(decoded.table))
        return decoded

    async def _fetch(self, info: BlobInfo, start: int) -> Window:
        """A window of `info` from `start`, reading ahead into the chunk after it, if listed."""
        chunks = self._chunks or []
        at = next((i + 1 for i, c in enumerate(chunks) if c.name == info.name), len(chunks))
        following = chunks[at] if at < len(chunks) else None
        return await self._fetcher.fetch(info, start, following=following, read_ahead=self._group)
