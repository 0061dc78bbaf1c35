"""Reading the whole feed in order: segments one after another, the shards of each side by side.

This is the single-consumer reader behind `cfp read` and the library API. The segment barrier
is built in: no event of segment N+1 is returned before every shard of segment N is finished,
which keeps per-blob order across segments (a blob may change shard between segments). Shards of
one segment are fetched concurrently and their batches interleave in shard order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

import structlog

from processor.changefeed.errors import FeedCorrupt, FeedError, MissingChunkError
from processor.changefeed.layout import SEGMENT_PREFIX, SEGMENTS_JSON, is_segment_path
from processor.changefeed.manifests import (
    SegmentManifest,
    parse_feed_manifest,
    parse_segment_manifest,
)
from processor.changefeed.position import FeedPosition, ShardBatch, ShardPosition
from processor.changefeed.selection import EventFilter, consumable_segments
from processor.changefeed.shard_reader import DEFAULT_READ_SIZE, ShardRead, ShardReader
from processor.changefeed.storage import FeedStorage

log = structlog.get_logger("cfp.reader")


@dataclass(frozen=True, slots=True)
class ShardFailure:
    segment: str
    shard: str
    error: FeedCorrupt


class IncompleteRead(FeedError):
    """Some shards could not be read; every other shard was read as far as the barrier allows."""

    def __init__(self, failures: list[ShardFailure]) -> None:
        super().__init__("; ".join(f"{f.error}" for f in failures))
        self.failures = failures


class FeedReader:
    """Iterates the consumable feed from a `FeedPosition`.

    `position` is always the position after every batch returned so far; a consumer that
    stops inside a batch takes `position_after(batch, k)` instead.

    Errors: `IncompleteRead` at the end of a pass when shards hit corrupt data (the other
    shards' batches were all returned first); `FeedUnavailable`, `FeedNotEnabled` and
    `ManifestError` as they happen.
    """

    def __init__(
        self,
        storage: FeedStorage,
        *,
        position: FeedPosition | None = None,
        event_filter: EventFilter | None = None,
        read_size: int = DEFAULT_READ_SIZE,
    ) -> None:
        self._storage = storage
        self.position = position or FeedPosition()
        self._filter = event_filter or EventFilter()
        self._read_size = read_size
        self._readers: dict[str, ShardReader] = {}
        self._readers_segment: str | None = None
        self.failures: dict[str, ShardFailure] = {}

    def position_after(self, batch: ShardBatch, k: int) -> FeedPosition:
        """The feed position just after record `k` of `batch` (the last one returned)."""
        return self.position.with_shard(batch.shard, batch.position_after(k))

    async def batches(
        self,
        *,
        follow: bool = False,
        poll_interval_s: float = 2.0,
        stop: asyncio.Event | None = None,
    ) -> AsyncGenerator[ShardBatch, None]:
        """Batches of everything consumable; with `follow`, keep polling until `stop` is set.

        Cancellation: `stop` ends the iteration between batches, never inside one.
        """
        stop = stop or asyncio.Event()
        while not stop.is_set():
            async for batch in self._read_available():
                yield batch
                if stop.is_set():
                    return
            if self.failures:
                raise IncompleteRead(list(self.failures.values()))
            if not follow:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=poll_interval_s)

    async def _segment_paths(self) -> list[str]:
        after = self.position.segment
        years = await self._storage.list_folders(SEGMENT_PREFIX)
        if after is not None:
            years = [y for y in years if y >= after[: len(SEGMENT_PREFIX) + 5]]
        paths: list[str] = []
        for year in years:
            paths.extend(
                b.name for b in await self._storage.list_blobs(year) if is_segment_path(b.name)
            )
        return paths

    async def _read_available(self) -> AsyncIterator[ShardBatch]:
        doc = await self._storage.read_document(SEGMENTS_JSON)
        if doc is None:
            return  # a freshly enabled account has no segments.json yet: the feed is empty
        feed = parse_feed_manifest(doc, path=SEGMENTS_JSON)
        todo = consumable_segments(
            await self._segment_paths(),
            last_consumable=feed.last_consumable,
            after=self.position.segment,
            include_after=not self.position.is_segment_done,
            window=self._filter.window,
        )
        for path in todo:
            raw = await self._storage.read_document(path)
            if raw is None:
                raise MissingChunkError(path, "segment manifest is gone (retention?)")
            segment = parse_segment_manifest(raw, path=path)
            if self.position.segment != path:
                self.position = FeedPosition(path, False, {})
            is_complete = True
            async for batch, complete in self._read_segment(segment):
                if batch is not None:
                    self.position = self.position.with_shard(batch.shard, batch.end)
                    yield batch
                is_complete = complete
            if not is_complete:
                return  # the barrier: later segments wait until this one is finished
            self.position = FeedPosition(path, True, {})
            log.debug("segment.done", segment=path)

    def _shard_readers(self, segment: SegmentManifest) -> list[ShardReader]:
        if self._readers_segment != segment.path:
            self._readers = {
                prefix: ShardReader(
                    self._storage,
                    segment=segment.path,
                    prefix=prefix,
                    position=self.position.shards.get(prefix, ShardPosition()),
                    event_filter=self._filter,
                    read_size=self._read_size,
                )
                for prefix in segment.shard_prefixes
            }
            self._readers_segment = segment.path
            self.failures.clear()
        return [r for p, r in self._readers.items() if p not in self.failures]

    async def _read_segment(
        self, segment: SegmentManifest
    ) -> AsyncIterator[tuple[ShardBatch | None, bool]]:
        """Rounds of concurrent reads over the segment's shards until each is caught up.

        Yields (batch, segment_complete_so_far); the last item's flag says whether the segment
        is finished.
        """
        readers = self._shard_readers(segment)
        complete: set[str] = set()
        while True:
            active = [
                r for r in readers if r.prefix not in complete and r.prefix not in self.failures
            ]
            if not active:
                break
            results = await self._read_round(active, is_finalized=segment.is_finalized)
            caught_up = True
            for reader, result in zip(active, results, strict=True):
                if isinstance(result, FeedCorrupt):
                    self.failures[reader.prefix] = ShardFailure(segment.path, reader.prefix, result)
                    log.error("shard.failed", shard=reader.prefix, error=str(result))
                    continue
                if result.batch is not None:
                    caught_up = False
                    yield result.batch, False
                if result.is_complete:
                    complete.add(reader.prefix)
            if caught_up:
                break
        is_done = not self.failures and len(complete) == len(readers)
        yield None, is_done

    @staticmethod
    async def _read_round(
        readers: list[ShardReader], *, is_finalized: bool
    ) -> list[ShardRead | FeedCorrupt]:
        async def one(reader: ShardReader) -> ShardRead | FeedCorrupt:
            try:
                return await reader.read(is_finalized=is_finalized)
            except FeedCorrupt as e:
                return e

        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(one(r)) for r in readers]
        return [t.result() for t in tasks]
