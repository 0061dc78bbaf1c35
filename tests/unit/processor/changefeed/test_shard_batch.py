"""A shard's batch: the position after each record, each event's key, and its share of the
bytes of the blocks it reads."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from processor.changefeed.decoding.avro_chunk import BlockSpan
from processor.changefeed.position import ShardPosition, event_position
from processor.changefeed.shard_batch import ShardBatch


def shard_batch(
    blocks: tuple[BlockSpan, ...],
    start: ShardPosition,
    end: ShardPosition,
    *,
    chunk: str = "c",
    segment: str = "s",
    keep: list[int] | None = None,
) -> ShardBatch:
    """The batch of `blocks` from `start` to `end`, records `keep` of it delivered (all)."""
    rows = [
        (b.offset, i)
        for j, b in enumerate(blocks)
        for i in range(start.event_index if j == 0 else 0, b.count)
        if not (b.offset == end.block_offset and i >= end.event_index)
    ]
    kept = [rows[k] for k in (range(len(rows)) if keep is None else keep)]
    return ShardBatch(
        segment=segment,
        shard="log/00/",
        chunk=chunk,
        start=start,
        end=end,
        blocks=blocks,
        table=pa.table({"n": list(range(len(kept)))}),
        offsets=np.array([o for o, _ in kept], np.int64),
        indexes=np.array([i for _, i in kept], np.int64),
        raw_count=len(rows),
    )


def spans(counts: list[int]) -> tuple[BlockSpan, ...]:
    out, at = [], 100
    for c in counts:
        out.append(BlockSpan(at, c, at + 20, at + 20 + 10 * c))
        at = out[-1].end
    return tuple(out)


@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.data())
def test_position_after_each_record_matches_a_walk(counts: list[int], data) -> None:  # type: ignore[no-untyped-def]
    blocks = spans(counts)
    skip = data.draw(st.integers(0, counts[0] - 1))
    n = sum(counts) - skip
    batch = shard_batch(
        blocks, ShardPosition("c", blocks[0].offset, skip), ShardPosition("c", blocks[-1].end, 0)
    )
    walk = []
    for i, b in enumerate(blocks):
        for j in range(skip if i == 0 else 0, b.count):
            walk.append(
                ShardPosition("c", b.end, 0)
                if j + 1 == b.count
                else ShardPosition("c", b.offset, j + 1)
            )
    assert [batch.position_after(k) for k in range(n)] == walk
    assert batch.position_after(n - 1) == batch.end
    assert batch.raw_count == n


@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.data())
def test_event_keys_name_each_event_the_same_from_any_start(counts: list[int], data) -> None:  # type: ignore[no-untyped-def]
    """A key is where a read starting at that event begins, whatever batch it came in; keys of
    one chunk increase strictly."""
    blocks = spans(counts)
    chunk = "log/03/2026/01/01/0100/00002.avro"
    segment = "idx/segments/2026/01/01/0100/meta.json"

    def batch_from(first_block: int, skip: int, keep: list[int] | None = None) -> ShardBatch:
        own = blocks[first_block:]
        return shard_batch(
            own,
            ShardPosition(chunk, own[0].offset, skip),
            ShardPosition(chunk, own[-1].end, 0),
            chunk=chunk,
            segment=segment,
            keep=keep,
        )

    whole = batch_from(0, 0)
    keys = whole.positions().to_pylist()
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert keys[0] == "202601010100.00002.000000000100.000000"
    first = data.draw(st.integers(0, len(blocks) - 1))
    skip = data.draw(st.integers(0, counts[first] - 1))
    later = batch_from(first, skip)
    offset = sum(counts[:first]) + skip
    assert later.positions().to_pylist() == keys[offset:]
    # filtered records (Control) keep the keys of the records around them
    n_later = len(keys) - offset
    kept = sorted(data.draw(st.sets(st.integers(0, n_later - 1), min_size=1)))
    assert batch_from(first, skip, kept).positions().to_pylist() == [keys[offset + i] for i in kept]
    assert event_position(segment, whole.position_after(len(keys) - 1)) > keys[-1]


def slice_of(blocks: tuple[BlockSpan, ...], lo: int, hi: int) -> ShardBatch:
    """The batch of raw records [lo, hi) of a run of blocks, as a reader would cut it."""
    firsts, at = [], 0
    for b in blocks:
        firsts.append(at)
        at += b.count
    j = max(i for i, f in enumerate(firsts) if f <= lo)
    k = max(i for i, f in enumerate(firsts) if f <= hi - 1)
    last = hi - firsts[k]
    end = (
        ShardPosition("c", blocks[k].end, 0)
        if last == blocks[k].count
        else ShardPosition("c", blocks[k].offset, last)
    )
    return shard_batch(blocks[j : k + 1], ShardPosition("c", blocks[j].offset, lo - firsts[j]), end)


@given(st.lists(st.integers(1, 40), min_size=1, max_size=5), st.data())
def test_a_run_read_in_slices_shares_out_every_block_byte_by_record(counts, data) -> None:  # type: ignore[no-untyped-def]
    blocks = spans(counts)
    total = sum(counts)
    cuts = sorted(
        set(data.draw(st.lists(st.integers(1, total - 1), max_size=8)) if total > 1 else [])
    )
    bounds = [0, *cuts, total]
    batches = [slice_of(blocks, lo, hi) for lo, hi in itertools.pairwise(bounds)]
    assert [b.raw_count for b in batches] == [hi - lo for lo, hi in itertools.pairwise(bounds)]
    size = blocks[-1].end - blocks[0].offset
    assert sum(b.read_bytes for b in batches) == size  # whole blocks, counted once passed
    assert abs(sum(b.read_share for b in batches) - size) <= len(batches)  # rounding only
    per_record = [(b.end - b.offset) / b.count for b in blocks]
    for b in batches:  # never more than its records' worth of the largest block
        assert b.read_share <= b.raw_count * max(per_record) + 1
        assert b.read_share >= b.raw_count * min(per_record) - 1
