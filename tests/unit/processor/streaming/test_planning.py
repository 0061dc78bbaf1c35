"""The pure planning of micro-batches: limits met within one step, every shard served in turn,
and chunk ranges that hand every block between two offsets to exactly one partition."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from processor.changefeed.position import FeedPosition, ShardPosition
from processor.changefeed.storage.layout import chunk_path
from processor.streaming.planning import Budget, ChunkRange, Frontier, Step, admit, chunk_ranges

SEGMENT = "idx/segments/2026/01/01/0000/meta.json"
HEADER = 100  # bytes before a chunk's first block


@dataclass(frozen=True)
class Block:
    chunk: str
    offset: int
    end: int
    count: int


def layout(sizes: list[list[list[tuple[int, int]]]]) -> dict[str, list[Block]]:
    """Shards of chunks of blocks (size, count) -> each shard's blocks in order."""
    shards = {}
    for s, chunks in enumerate(sizes):
        prefix = f"log/{s:02d}/2026/01/01/0000/"
        blocks = []
        for n, chunk_blocks in enumerate(chunks):
            at = HEADER
            for size, count in chunk_blocks:
                blocks.append(Block(chunk_path(prefix, n), at, at + size, count))
                at += size
        shards[prefix] = blocks
    return shards


feeds = st.lists(  # shards
    st.lists(  # chunks
        st.lists(st.tuples(st.integers(20, 400), st.integers(1, 50)), min_size=1, max_size=6),
        min_size=1,
        max_size=3,
    ),
    min_size=1,
    max_size=4,
).map(layout)


def steps_of(blocks: list[Block], first: int) -> tuple[Step, ...]:
    return tuple(
        Step(
            ShardPosition(b.chunk, b.end, 0),
            b.count,
            b.end - b.offset,
            i == first or b.chunk != blocks[i - 1].chunk,
        )
        for i, b in enumerate(blocks)
        if i >= first
    )


@given(feeds, st.integers(1, 500), st.data())
def test_a_limit_is_met_within_one_step_and_shards_take_turns(
    feed: dict[str, list[Block]], limit: int, data: st.DataObject
) -> None:
    firsts = {p: data.draw(st.integers(0, len(bs))) for p, bs in feed.items()}
    starts = {
        p: ShardPosition()
        if firsts[p] == 0
        else ShardPosition(bs[firsts[p] - 1].chunk, bs[firsts[p] - 1].end, 0)
        for p, bs in feed.items()
    }
    frontiers = {p: Frontier(steps_of(bs, firsts[p])) for p, bs in feed.items()}
    result = admit(starts, frontiers, Budget(events=limit))
    taken = {
        p: sum(1 for s in frontiers[p].steps if _at_or_before(s.after, result.ends[p]))
        for p in feed
    }
    events = sum(s.events or 0 for p in feed for s in frontiers[p].steps[: taken[p]])
    biggest = max((s.events or 0 for f in frontiers.values() for s in f.steps), default=0)
    available = sum(len(f.steps) for f in frontiers.values())
    if sum(taken.values()) < available:
        assert result.cut
        assert limit <= events < limit + biggest
    else:
        assert not result.cut
    # round-robin: shards that had steps left differ by at most one step
    short = [taken[p] for p in feed if taken[p] < len(frontiers[p].steps)]
    if short:
        assert max(taken.values()) - min(short) <= 1
    assert not result.starved


@given(feeds)
def test_a_shard_whose_known_steps_ran_out_is_starved_until_the_limit_is_met(
    feed: dict[str, list[Block]],
) -> None:
    frontiers = {p: Frontier(steps_of(bs[:1], 0), more=True) for p, bs in feed.items()}
    result = admit(dict.fromkeys(feed, ShardPosition()), frontiers, Budget(events=10**9))
    assert result.starved == frozenset(feed)
    assert not admit(dict.fromkeys(feed, ShardPosition()), frontiers, Budget(events=1)).starved


def _at_or_before(a: ShardPosition, b: ShardPosition) -> bool:
    return b.chunk is not None and (a.chunk or "", a.block_offset) <= (b.chunk, b.block_offset)


def read_model(r: ChunkRange, blocks: list[Block]) -> list[Block]:
    """What an executor reads of `r`: the blocks of its chunk that start in it."""
    mine = [b for b in blocks if b.chunk == r.chunk]
    start = max(r.start, HEADER)
    return [b for b in mine if b.offset >= start and (r.end is None or b.offset < r.end)]


@given(feeds, st.integers(50, 2000), st.data())
def test_every_block_between_two_offsets_is_read_by_exactly_one_range(
    feed: dict[str, list[Block]], split: int, data: st.DataObject
) -> None:
    start_shards, end_shards, expected = {}, {}, []
    for prefix, blocks in feed.items():
        a = data.draw(st.integers(0, len(blocks)))
        b = data.draw(st.integers(a, len(blocks)))
        if a:
            start_shards[prefix] = ShardPosition(blocks[a - 1].chunk, blocks[a - 1].end, 0)
        if b:
            end_shards[prefix] = ShardPosition(blocks[b - 1].chunk, blocks[b - 1].end, 0)
        expected += blocks[a:b]
    start = FeedPosition(SEGMENT, False, start_shards)
    end = FeedPosition(SEGMENT, data.draw(st.booleans()), end_shards)
    ranges = chunk_ranges(start, end, split_bytes=split)
    read = [b for r in ranges for b in read_model(r, feed[r.prefix])]
    assert sorted(read, key=repr) == sorted(expected, key=repr)
    assert all(r.end - r.start <= split for r in ranges if r.end is not None and r.split)
    for before, after in itertools.pairwise(ranges):
        if after.split:  # the pieces of one range meet without a gap
            assert (before.chunk, before.end) == (after.chunk, after.start)


@given(feeds)
def test_a_new_segment_is_read_from_its_beginning(feed: dict[str, list[Block]]) -> None:
    before = FeedPosition(
        "idx/segments/2025/12/31/2300/meta.json", True, {"log/09/x/": ShardPosition("c", 5, 0)}
    )
    end = FeedPosition(
        SEGMENT, True, {p: ShardPosition(bs[-1].chunk, bs[-1].end, 0) for p, bs in feed.items()}
    )
    ranges = chunk_ranges(before, end, split_bytes=1 << 30)
    read = [b for r in ranges for b in read_model(r, feed[r.prefix])]
    assert len(read) == sum(len(bs) for bs in feed.values())
    assert chunk_ranges(end, end, split_bytes=1 << 30) == []
