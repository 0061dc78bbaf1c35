"""Where a hand move of a stopped lease lands: past a block, a chunk or a segment, never back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.admin.lease_moves import (
    MoveError,
    next_block_offset,
    past_block,
    past_chunk,
    past_segment,
)
from processor.changefeed.position import ShardPosition
from processor.changefeed.storage.feed_storage import BlobInfo
from processor.reading.lease_position import LeasePosition

SEGMENT = "idx/segments/2026/01/01/0000/meta.json"
PREFIX = "log/00/2026/01/01/0000/"


def chunk(n: int) -> str:
    return f"{PREFIX}{n:05d}.avro"


@given(
    st.binary(min_size=16, max_size=16).filter(lambda s: len(set(s)) > 1),
    st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=8),
    st.integers(0, 1000),
)
def test_past_a_block_is_just_after_its_sync_marker(
    sync: bytes, bodies: list[bytes], base: int
) -> None:
    bodies = [b for b in bodies if sync not in b + sync[:15] and sync not in sync[1:] + b]
    data = b"".join(body + sync for body in bodies)
    starts, at = [], base
    for body in bodies:
        starts.append(at)
        at += len(body) + len(sync)
    for i, start in enumerate(starts):
        got = next_block_offset(data[start - base :], base=start, sync=sync)
        assert got == (starts[i + 1] if i + 1 < len(starts) else at)
    assert next_block_offset(b"no marker here", base=base, sync=sync) is None


positions = st.builds(
    lambda c, off, idx: LeasePosition(SEGMENT, False, ShardPosition(chunk(c), off, idx)),
    st.integers(0, 5),
    st.integers(0, 10_000),
    st.integers(0, 50),
)
listings = st.lists(st.integers(0, 8), unique=True).map(
    lambda ns: [BlobInfo(chunk(n), 100 * (n + 1)) for n in sorted(ns)]
)


@given(positions, listings, st.one_of(st.none(), st.integers(1, 20_000)))
def test_a_move_never_goes_back_and_lands_on_a_block_or_chunk_start(
    pos: LeasePosition, chunks: list[BlobInfo], delta: int | None
) -> None:
    after = None if delta is None else pos.shard.block_offset + delta
    for moved in (past_chunk(pos, chunks), past_block(pos, after, chunks), past_segment(pos)):
        assert pos.is_before(moved)
        assert moved.shard.event_index == 0
    by_chunk = past_chunk(pos, chunks)
    later = [c.name for c in chunks if c.name > (pos.shard.chunk or "")]
    if later:
        assert by_chunk.shard == ShardPosition(later[0], 0, 0)
    else:
        assert by_chunk.is_segment_done and by_chunk.segment == SEGMENT


def test_nothing_to_move_past_is_an_error() -> None:
    at = LeasePosition(SEGMENT, False, ShardPosition(chunk(0), 500, 0))
    with pytest.raises(MoveError):
        past_block(at, 500, [])
    with pytest.raises(MoveError):
        past_segment(LeasePosition())
    with pytest.raises(MoveError):
        past_chunk(LeasePosition(SEGMENT, True), [])


def test_the_gap_continues_at_the_first_chunk_after_the_missing_one() -> None:
    from processor.reading.retention_gaps import first_after

    names = ["log/00/x/00000.avro", "log/00/x/00002.avro", "log/00/x/00003.avro"]
    assert first_after(names, "log/00/x/00001.avro") == "log/00/x/00002.avro"
    assert first_after(names, "log/00/x/00003.avro") is None
    assert first_after([], "log/00/x/00000.avro") is None
