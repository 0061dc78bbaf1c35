"""Pure decisions of the source: how far a micro-batch may go, and which chunk ranges lie
between two offsets.

A shard's readable bytes are a list of `Step`s from its position: one per block when the blocks
were scanned (for an event or byte limit, and for the tail of a chunk still being written), else
one per chunk. `admit` hands steps out round-robin over the shards until a limit is met, so a
batch is bounded within one step, and every shard advances. `chunk_ranges` turns two offsets of
one segment into the ranges the executors read, split at byte points where a range is long (a
block belongs to the range it starts in); it needs nothing but the two positions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from processor.changefeed.errors import InvalidContinuation
from processor.changefeed.position import FeedPosition, ShardPosition
from processor.changefeed.storage.layout import chunk_number, chunk_path


@dataclass(frozen=True, slots=True)
class Step:
    """Reading on to `after` delivers `events` records (None: not counted) of `size` bytes;
    `opens` says it is the first step into its chunk (a file, for `maxFilesPerTrigger`)."""

    after: ShardPosition
    events: int | None
    size: int
    opens: bool


@dataclass(frozen=True, slots=True)
class Frontier:
    """The steps known from a shard's position; `more`: more exist that are not known yet
    (blocks not scanned); `blocked`: lost data (a chunk gone) stops the steps, to be stepped
    over by the next micro-batch."""

    steps: tuple[Step, ...] = ()
    more: bool = False
    blocked: bool = False


@dataclass(frozen=True, slots=True)
class Budget:
    """A micro-batch's limits; None: no limit of that kind."""

    events: int | None = None
    size: int | None = None
    files: int | None = None

    @property
    def counts_blocks(self) -> bool:
        """Whether the limits need the blocks' record counts and sizes (scanned on the driver)."""
        return self.events is not None or self.size is not None


@dataclass(frozen=True, slots=True)
class Admission:
    """`ends`: each shard's position after the admitted steps. `cut`: a limit stopped the batch
    before every known step was in it. `starved`: shards whose known steps all went in while
    the limits were not met and more exist: scan further and admit again."""

    ends: dict[str, ShardPosition]
    cut: bool
    starved: frozenset[str]


def admit(
    starts: Mapping[str, ShardPosition], frontiers: Mapping[str, Frontier], budget: Budget
) -> Admission:
    """Hand out steps one per shard per round (shards in name order) until a limit is met:
    each limit is met within one step, and at least one step goes in when any exists."""
    ends = dict(starts)
    taken = dict.fromkeys(frontiers, 0)
    events = size = files = 0
    order = sorted(frontiers)
    while True:
        progressed = False
        for shard in order:
            steps = frontiers[shard].steps
            if taken[shard] == len(steps):
                continue
            if _met(budget, events, size, files):
                return Admission(ends, True, frozenset())
            step = steps[taken[shard]]
            taken[shard] += 1
            ends[shard] = step.after
            events += step.events or 0
            size += step.size
            files += step.opens
            progressed = True
        if not progressed:
            starved = frozenset(s for s in order if frontiers[s].more)
            return Admission(
                ends, False, frozenset() if _met(budget, events, size, files) else starved
            )


def _met(budget: Budget, events: int, size: int, files: int) -> bool:
    return (
        (budget.events is not None and events >= budget.events)
        or (budget.size is not None and size >= budget.size)
        or (budget.files is not None and files >= budget.files)
    )


@dataclass(frozen=True, slots=True)
class ChunkRange:
    """The blocks of `chunk` that start in `[start, end)` (`end` None: to the chunk's end),
    skipping the first `skip` records of the first one. `split`: `start` is a split point,
    not a block's start; the first block is found after the next sync marker."""

    segment: str
    prefix: str
    chunk: str
    start: int
    end: int | None
    skip: int = 0
    split: bool = False


def chunk_ranges(start: FeedPosition, end: FeedPosition, *, split_bytes: int) -> list[ChunkRange]:
    """The ranges a micro-batch from `start` to `end` reads: `end`'s segment, each shard from
    its position in `start` (its beginning when `start` is another segment, or that segment
    finished) to its position in `end`.

    Errors: `InvalidContinuation` for offsets no batch can lie between (an end before its start,
    an end inside a block)."""
    if end.segment is None or (end.segment == start.segment and start.is_segment_done):
        return []
    same = end.segment == start.segment
    ranges: list[ChunkRange] = []
    for prefix in sorted(end.shards):
        to = end.shards[prefix]
        begin = start.shards.get(prefix, ShardPosition()) if same else ShardPosition()
        ranges.extend(_shard_ranges(end.segment, prefix, begin, to, split_bytes))
    return ranges


def _shard_ranges(
    segment: str, prefix: str, begin: ShardPosition, to: ShardPosition, split_bytes: int
) -> list[ChunkRange]:
    if to.chunk is None:
        return []
    if to.event_index:
        raise InvalidContinuation(f"offset ends inside the block at {to.chunk}:{to.block_offset}")
    first = chunk_path(prefix, 0) if begin.chunk is None else begin.chunk
    lo, hi = chunk_number(first), chunk_number(to.chunk)
    if hi < lo or (hi == lo and to.block_offset < begin.block_offset):
        raise InvalidContinuation(f"offset of {prefix} ends before it starts: {begin} to {to}")
    ranges: list[ChunkRange] = []
    for n in range(lo, hi + 1):
        chunk = chunk_path(prefix, n)
        a = begin.block_offset if n == lo else 0
        skip = begin.event_index if n == lo else 0
        b = to.block_offset if n == hi else None
        if b is not None and b <= a:
            continue
        ranges.extend(_split(ChunkRange(segment, prefix, chunk, a, b, skip), split_bytes))
    return ranges


def _split(whole: ChunkRange, split_bytes: int) -> Sequence[ChunkRange]:
    """`whole` cut every `split_bytes` bytes (when its end is known)."""
    if whole.end is None or whole.end - whole.start <= split_bytes:
        return [whole]
    cuts = range(whole.start, whole.end, split_bytes)
    return [
        ChunkRange(
            whole.segment,
            whole.prefix,
            whole.chunk,
            a,
            min(a + split_bytes, whole.end),
            whole.skip if a == whole.start else 0,
            split=a != whole.start,
        )
        for a in cuts
    ]
