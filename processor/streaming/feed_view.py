"""The driver's look at the feed: where a micro-batch from an offset may end.

Each call makes one catalog look (`segments.json`; the segment folders are listed only when its
`lastConsumable` moved) and lists the shards of the one segment it plans in. A micro-batch
never spans two segments with data: it enters a segment only when every shard of the one before
is at its end and that segment is finalized, so the segment barrier holds per batch, and per
blob order with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import structlog

from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.errors import FeedError, MissingChunkError
from processor.changefeed.position import FeedPosition, ShardPosition
from processor.changefeed.selection import TimeRange
from processor.changefeed.storage.feed_storage import BlobInfo, FeedStorage
from processor.changefeed.storage.layout import chunk_number, segment_time
from processor.changefeed.storage.manifests import SegmentManifest
from processor.streaming.block_index import SCAN_BYTES, BlockIndex
from processor.streaming.offsets import StreamOffset
from processor.streaming.planning import Admission, Budget, Frontier, Step, admit

log = structlog.get_logger("cfp.stream")


class DataLoss(FeedError):
    """Data the stream had not read yet is gone (retention, deletion): with `failOnDataLoss`
    the query stops here."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what}; set the option failOnDataLoss=false to step over lost data (the offsets "
            "then count it in 'skipped')"
        )


@dataclass(frozen=True, slots=True)
class Listing:
    """A shard's chunks, and whether they are all it will ever have (listed after its segment
    was seen finalized)."""

    chunks: tuple[BlobInfo, ...]
    is_final: bool


class FeedView:
    def __init__(
        self,
        storage: FeedStorage,
        *,
        account: str,
        window: TimeRange,
        fail_on_data_loss: bool,
        now: Callable[[], datetime],
    ) -> None:
        self._storage = storage
        self._account = account
        self._window = window
        self._fail = fail_on_data_loss
        self._now = now
        self._catalog = FeedCatalog(storage, refresh_s=0.0)
        self._blocks = BlockIndex(storage)
        self._final_listings: dict[str, Listing] = {}
        self._segments: list[str] = []  # as of the last look

    def lag(self, position: FeedPosition) -> dict[str, object]:
        """How far the feed goes beyond `position`, as of the last look: the segments after
        it and the last consumable one."""
        behind = [s for s in self._segments if position.segment is None or s > position.segment]
        return {
            "segmentsBehind": len(behind),
            "lastSegment": self._segments[-1] if self._segments else None,
        }

    async def latest(
        self, start: StreamOffset, budget: Budget, *, until: FeedPosition | None = None
    ) -> StreamOffset:
        """Where a micro-batch from `start` ends: `start` itself when nothing new can be read.
        Segments without data on the way are passed in the same call. Never beyond `until`
        (`Trigger.AvailableNow`'s target), when given."""
        segments = self._readable(await self._catalog.segments(max_age_s=0.0))
        self._segments = segments
        if until is not None:
            segments = [s for s in segments if until.segment is not None and s <= until.segment]
        pos, skipped = start.position, start.skipped
        while True:
            if pos.segment is None or pos.is_segment_done:
                following = [s for s in segments if pos.segment is None or s > pos.segment]
                if not following:
                    break
                here = FeedPosition(following[0], False, {})
            else:
                here = pos
            assert here.segment is not None
            try:
                manifest = await self._catalog.manifest(here.segment)
            except MissingChunkError as e:
                skipped += self._lost(f"segment {here.segment} is gone ({e.problem})")
                pos = FeedPosition(here.segment, True, dict(here.shards))
                continue
            cap = until if until is not None and until.segment == here.segment else None
            end, skipped = await self._admit(manifest, here, budget, skipped, cap)
            if end.is_segment_done and not _moves(here, end):
                pos = end  # an empty segment, or one finished exactly: on to the next
                continue
            if _moves(here, end) or (end.is_segment_done and not here.is_segment_done):
                pos = end
            break
        if pos == start.position and skipped == start.skipped:
            return start
        return StreamOffset(self._account, pos, skipped, self._now())

    async def end_of_feed(self) -> FeedPosition:
        """Everything consumable now (`startingOffsets=latest`, `Trigger.AvailableNow`'s
        target): the newest segment, its shards at their last whole block. Segments before it
        are finalized and cannot grow: only the newest is listed."""
        segments = self._readable(await self._catalog.segments(max_age_s=0.0))
        if not segments:
            return FeedPosition()
        before = FeedPosition(segments[-2], True, {}) if len(segments) > 1 else FeedPosition()
        end = await self.latest(StreamOffset(self._account, before), Budget())
        return end.position

    def _readable(self, segments: list[str]) -> list[str]:
        """The consumable segments that may hold events of the time window."""
        chosen = []
        for path in segments:
            begin = segment_time(path)
            if self._window.is_past(begin):
                break
            if self._window.segment_may_hold(begin):
                chosen.append(path)
        return chosen

    def _lost(self, what: str) -> int:
        if self._fail:
            raise DataLoss(what)
        log.warning("stream.data_lost", what=what)
        return 1

    async def _admit(
        self,
        manifest: SegmentManifest,
        here: FeedPosition,
        budget: Budget,
        skipped: int,
        cap: FeedPosition | None,
    ) -> tuple[FeedPosition, int]:
        """The end of a micro-batch from `here` in `manifest`'s segment (not beyond `cap`)."""
        is_final = manifest.is_finalized  # observed before the listings below
        listings = {
            p: await self._listing(manifest.path, p, is_final) for p in manifest.shard_prefixes
        }
        starts = {p: here.shards.get(p, ShardPosition()) for p in manifest.shard_prefixes}
        for prefix, listing in listings.items():
            starts[prefix], lost = self._past_gaps(prefix, starts[prefix], listing)
            skipped += lost
        reach = dict.fromkeys(listings, SCAN_BYTES)
        while True:
            frontiers = {
                p: _capped(
                    await self._frontier(p, starts[p], listings[p], budget, reach[p]),
                    None if cap is None else cap.shards.get(p, ShardPosition()),
                )
                for p in listings
            }
            admission: Admission = admit(starts, frontiers, budget)
            if not admission.starved:
                break
            for p in admission.starved:
                reach[p] *= 2
        ends = {p: e for p, e in admission.ends.items() if e.chunk is not None}
        finished = (
            is_final
            and not admission.cut
            and all(not (f.more or f.blocked) for f in frontiers.values())
            and all(listings[p].is_final for p in listings)
            and (cap is None or cap.is_segment_done)
        )
        return FeedPosition(manifest.path, finished, ends), skipped

    async def _listing(self, segment: str, prefix: str, is_final: bool) -> Listing:
        known = self._final_listings.get(prefix)
        if known is not None:
            return known
        chunks = tuple(
            b for b in await self._storage.list_blobs(prefix) if b.name.endswith(".avro")
        )
        listing = Listing(chunks, is_final)
        if is_final:
            if len(self._final_listings) > 4096:
                self._final_listings.clear()
            self._final_listings[prefix] = listing
        return listing

    def _past_gaps(
        self, prefix: str, start: ShardPosition, listing: Listing
    ) -> tuple[ShardPosition, int]:
        """`start`, moved over chunks that are gone (retention, deletion) right in front of it,
        and how many gaps that was (0 or 1). Chunks are numbered from 00000 without gaps: a
        missing number, or the chunk of `start` missing, is lost data. A gap further on stops
        the shard's steps in front of it (`_frontier`); the next micro-batch steps over it."""
        sizes = {chunk_number(c.name): c for c in listing.chunks}
        later = sorted(n for n in sizes if start.chunk is None or n >= chunk_number(start.chunk))
        if start.chunk is None:
            gone = bool(later) and later[0] > 0
        else:
            number = chunk_number(start.chunk)
            here = sizes.get(number)
            if here is not None and start.block_offset < here.size:
                return start, 0  # reading inside a chunk that is there
            after = [n for n in later if n > number]
            gone = here is None or (bool(after) and after[0] > number + 1)
            later = after
        if not gone:
            return start, 0
        lost = self._lost(f"chunks of {prefix} are gone before {_first_name(sizes, later)}")
        if not later:
            return ShardPosition(), lost  # nothing left of this shard
        return ShardPosition(sizes[later[0]].name, 0, 0), lost

    async def _frontier(
        self, prefix: str, start: ShardPosition, listing: Listing, budget: Budget, reach: int
    ) -> Frontier:
        """The steps readable from `start`: whole chunks where their size is known to end on a
        block, blocks where they must be counted (scanned up to `reach` bytes ahead)."""
        chunks = [c for c in listing.chunks if start.chunk is None or c.name >= start.chunk]
        steps: list[Step] = []
        scanned = 0
        for i, info in enumerate(chunks):
            if i and chunk_number(info.name) != chunk_number(chunks[i - 1].name) + 1:
                return Frontier(tuple(steps), blocked=True)  # lost chunks: the next batch
            at = start.block_offset if info.name == start.chunk else 0
            if info.size <= max(at, 0) or info.size == 0:
                continue
            is_growing = i == len(chunks) - 1 and not listing.is_final
            if not budget.counts_blocks and not is_growing:
                if at < info.size:
                    after = ShardPosition(info.name, info.size, 0)
                    steps.append(Step(after, None, info.size - at, True))
                continue
            if budget.counts_blocks and scanned >= reach:
                return Frontier(tuple(steps), more=True)
            upto = at + (reach - scanned) if budget.counts_blocks else info.size
            known = await self._blocks.blocks(
                info.name, start=at, upto=upto, size=info.size, is_final=not is_growing
            )
            skip = start.event_index if info.name == start.chunk else 0
            blocks = [b for b in known.blocks if b.end > at]
            chunk_steps = [
                Step(
                    ShardPosition(info.name, b.end, 0),
                    b.count - (skip if b.offset <= at + 16 else 0),
                    b.end - max(b.offset, at),
                    j == 0,
                )
                for j, b in enumerate(blocks)
            ]
            scanned += known.scanned_to - at
            if not budget.counts_blocks and chunk_steps:  # one step to its last whole block
                chunk_steps = [Step(chunk_steps[-1].after, None, known.scanned_to - at, True)]
            steps.extend(chunk_steps)
            if upto <= known.scanned_to < info.size:  # stopped by the reach, not at the end
                return Frontier(tuple(steps), more=True)
        return Frontier(tuple(steps), more=False)


def _first_name(chunks: dict[int, BlobInfo], numbers: list[int]) -> str:
    return chunks[numbers[0]].name if numbers else "the shard's end"


def _capped(frontier: Frontier, cap: ShardPosition | None) -> Frontier:
    """`frontier` without the steps beyond `cap` (None: no cap)."""
    if cap is None:
        return frontier
    if cap.chunk is None:
        return Frontier()
    steps = tuple(
        s
        for s in frontier.steps
        if (s.after.chunk or "", s.after.block_offset) <= (cap.chunk, cap.block_offset)
    )
    beyond = len(steps) < len(frontier.steps)
    return Frontier(steps, more=frontier.more and not beyond, blocked=frontier.blocked)


def _moves(before: FeedPosition, after: FeedPosition) -> bool:
    """Whether `after` stands anywhere else than `before` in its segment (entering another
    segment counts only with something read in it)."""
    if before.segment != after.segment:
        return bool(after.shards)
    return _begun(before) != _begun(after)


def _begun(position: FeedPosition) -> dict[str, ShardPosition]:
    return {p: s for p, s in position.shards.items() if s.chunk is not None}
