"""Reading the whole feed in order: segments one after another, the shards of each side by side.

This is the single-consumer reader behind `cfp read` and the library API. The segment barrier
is built in: no event of segment N+1 is returned before every shard of segment N is finished,
which keeps per-blob order across segments (a blob may change shard between segments). Shards of
one segment are fetched concurrently and their batches interleave in shard order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass

import structlog

from processor.changefeed.catalog import list_segment_paths
from processor.changefeed.errors import FeedCorrupt, FeedError, MissingChunkError
from processor.changefeed.position import FeedPosition, ShardPosition
from processor.changefeed.selection import EventFilter, consumable_segments
from processor.changefeed.shard_batch import DEFAULT_BATCH_EVENTS, ShardBatch
from processor.changefeed.shard_reader import ShardRead, ShardReader, ShardReading
from processor.changefeed.storage.feed_storage import FeedStorage
from processor.changefeed.storage.layout import DEFAULT_READ_SIZE, SEGMENTS_JSON
from processor.changefeed.storage.manifests import (
    SegmentManifest,
    parse_feed_manifest,
    parse_segment_manifest,
)

log = structlog.get_logger("cfp.reader")

# Batches each shard may decode ahead of the consumer (bounds memory: shards x this x batch).
PREFETCH_BATCHES = 2


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
        batch_events: int = DEFAULT_BATCH_EVENTS,
        with_json: bool = False,  # each window's JSON made where it is decoded (`ShardReading`)
    ) -> None:
        self._storage = storage
        self.position = position or FeedPosition()
        self._filter = event_filter or EventFilter()
        self._reading = ShardReading(self._filter, read_size, batch_events, with_json)
        self._readers: dict[str, ShardReader] = {}
        self._readers_segment: str | None = None
        # the next segment's readers, listed and with their first bytes (`_prefetch`)
        self._ahead: tuple[str, dict[str, ShardReader]] | None = None
        self._fetched_ahead = False  # whether the readers of this segment came from `_ahead`
        self.failures: dict[str, ShardFailure] = {}
        self._iterations: list[AsyncGenerator[ShardBatch, None]] = []

    async def __aenter__(self) -> FeedReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every iteration still open, stopping its read-ahead tasks.

        An iteration left early keeps its shard pumps suspended until it is closed: leave the
        reader's `async with` block (or call this) before closing the storage.
        """
        while self._iterations:
            await self._iterations.pop().aclose()

    def position_after(self, batch: ShardBatch, k: int) -> FeedPosition:
        """The feed position just after record `k` of `batch` (the last one returned)."""
        return self.position.with_shard(batch.shard, batch.position_after(k))

    def batches(
        self,
        *,
        follow: bool = False,
        poll_interval_s: float = 2.0,
        stop: asyncio.Event | None = None,
    ) -> AsyncGenerator[ShardBatch, None]:
        """Batches of everything consumable; with `follow`, keep polling until `stop` is set.

        Cancellation: `stop` ends the iteration between batches, never inside one. Resource
        handling: shards are read ahead by tasks that live as long as the iteration; an
        iteration left early is closed by `aclose()` / the reader's `async with` exit.
        """
        iteration = self._batches(follow, poll_interval_s, stop or asyncio.Event())
        self._iterations.append(iteration)
        return iteration

    async def _batches(
        self, follow: bool, poll_interval_s: float, stop: asyncio.Event
    ) -> AsyncGenerator[ShardBatch, None]:
        while not stop.is_set():
            async with aclosing(self._read_available()) as available:
                async for batch in available:
                    yield batch
                    if stop.is_set():
                        return
            if self.failures:
                raise IncompleteRead(list(self.failures.values()))
            if not follow:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=poll_interval_s)

    async def _read_available(self) -> AsyncGenerator[ShardBatch, None]:
        doc = await self._storage.read_document(SEGMENTS_JSON)
        if doc is None:
            return  # a freshly enabled account has no segments.json yet: the feed is empty
        feed = parse_feed_manifest(doc, path=SEGMENTS_JSON)
        todo = consumable_segments(
            await list_segment_paths(self._storage, after=self.position.segment),
            last_consumable=feed.last_consumable,
            after=self.position.segment,
            include_after=not self.position.is_segment_done,
            window=self._filter.window,
        )
        for i, path in enumerate(todo):
            segment = await _manifest(self._storage, path)
            if self.position.segment != path:
                self.position = FeedPosition(path, False, {})
            is_complete = True
            after = todo[i + 1] if i + 1 < len(todo) else None
            async with aclosing(self._read_segment(segment, after)) as items:
                async for batch, complete in items:
                    if batch is not None:
                        self.position = self.position.with_shard(batch.shard, batch.end)
                        yield batch
                    is_complete = complete
            if not is_complete:
                return  # the barrier: later segments wait until this one is finished
            self.position = FeedPosition(path, True, {})
            log.debug("segment.done", segment=path)

    def _new_readers(self, segment: SegmentManifest) -> dict[str, ShardReader]:
        return {
            prefix: ShardReader(
                self._storage,
                segment=segment.path,
                prefix=prefix,
                position=self.position.shards.get(prefix, ShardPosition())
                if self.position.segment == segment.path
                else ShardPosition(),
                how=self._reading,
            )
            for prefix in segment.shard_prefixes
        }

    def _shard_readers(self, segment: SegmentManifest) -> list[ShardReader]:
        if self._readers_segment != segment.path:
            ahead, self._ahead = self._ahead, None
            fresh = not self.position.shards
            self._fetched_ahead = ahead is not None and ahead[0] == segment.path and fresh
            if ahead is not None and self._fetched_ahead:
                self._readers = ahead[1]  # listed, and their first bytes fetched, already
            else:
                self._readers = self._new_readers(segment)
            self._readers_segment = segment.path
            self.failures.clear()
        return [r for p, r in self._readers.items() if p not in self.failures]

    async def _prefetch(self, path: str) -> None:
        """The next segment's shards listed and their first bytes fetched while this segment is
        read (its events still wait for the barrier). Best effort: `read()` meets any error."""
        with contextlib.suppress(FeedError):
            segment = await _manifest(self._storage, path)
            readers = self._new_readers(segment)
            await asyncio.gather(
                *(r.prefetch(is_finalized=segment.is_finalized) for r in readers.values())
            )
            self._ahead = (path, readers)

    async def _read_segment(
        self, segment: SegmentManifest, after: str | None
    ) -> AsyncGenerator[tuple[ShardBatch | None, bool], None]:
        """Read every shard of `segment` until each is caught up, shards in parallel.

        One pump task per shard reads ahead (up to `PREFETCH_BATCHES` batches), so downloads
        and decoding of some shards overlap with the consumer's work on others; once the first
        batch is handed out, the shards of the segment `after` this one (if any) are listed and
        their first bytes fetched. Batches are handed out round-robin in shard order. Yields
        (batch, False) items and finally (None, segment_is_finished).

        Cancellation: closing the iteration early cancels the pumps; shard readers that ran
        ahead of what was handed out are dropped, so a later read resumes from `position`.
        """
        readers = self._shard_readers(segment)
        queues: dict[str, asyncio.Queue[ShardBatch | ShardRead | FeedCorrupt]] = {
            r.prefix: asyncio.Queue(maxsize=PREFETCH_BATCHES) for r in readers
        }
        complete: set[str] = set()
        finished = False
        try:
            async with asyncio.TaskGroup() as tg:

                def pump(readers: list[ShardReader]) -> None:
                    for r in readers:
                        tg.create_task(_pump(r, segment.is_finalized, queues[r.prefix], tg))

                # a read's first segment, nothing of it fetched ahead: its first shard alone until
                # its first batch is in (the others would share the storage and the decoder with
                # it), so that the read's first line comes out first
                fresh = all(r.position.chunk is None for r in readers)
                waiting = readers[1:] if fresh and not self._fetched_ahead else []
                pump([r for r in readers if r not in waiting])
                active = list(readers)
                while active:
                    for reader in list(active):
                        item = await queues[reader.prefix].get()
                        pump(waiting)
                        waiting = []
                        if isinstance(item, ShardBatch):
                            if after is not None:  # runs once the consumer waits: after it
                                tg.create_task(self._prefetch(after))  # has the first batch
                                after = None
                            yield item, False
                            continue
                        active.remove(reader)
                        if isinstance(item, FeedCorrupt):
                            failure = ShardFailure(segment.path, reader.prefix, item)
                            self.failures[reader.prefix] = failure
                            log.error("shard.failed", shard=reader.prefix, error=str(item))
                        elif item.is_complete:
                            complete.add(reader.prefix)
            finished = True
        except BaseExceptionGroup as group:
            raise _first_feed_error(group) from None
        finally:
            if not finished:
                self._readers_segment = None  # readers ran ahead of what was handed out
        yield None, not self.failures and len(complete) == len(readers)


async def _manifest(storage: FeedStorage, path: str) -> SegmentManifest:
    raw = await storage.read_document(path)
    if raw is None:
        raise MissingChunkError(path, "segment manifest is gone (retention?)")
    return parse_segment_manifest(raw, path=path)


async def _pump(
    reader: ShardReader,
    is_finalized: bool,
    queue: asyncio.Queue[ShardBatch | ShardRead | FeedCorrupt],
    group: asyncio.TaskGroup,
) -> None:
    """Read one shard ahead into `queue`; ends with the caught-up result or the error."""
    try:
        while True:
            result = await reader.read(is_finalized=is_finalized, read_ahead=group)
            if result.batch is None:
                await queue.put(result)
                return
            await queue.put(result.batch)
    except FeedCorrupt as e:
        await queue.put(e)


def _first_feed_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error to raise for a failed pump: the first one, unwrapped from the group."""
    leaves: list[BaseException] = []

    def walk(g: BaseExceptionGroup[BaseException]) -> None:
        for e in g.exceptions:
            if isinstance(e, BaseExceptionGroup):
                walk(e)
            else:
                leaves.append(e)

    walk(group)
    return leaves[0] if leaves else group
