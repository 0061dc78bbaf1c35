"""`ArrowBatch.after`: the tail of a batch above a position, in every form the batch offers."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from observers import ArrowBatch


def batch(positions: list[str], *, columns: bool) -> ArrowBatch:
    records = [{"id": p, "n": i} for i, p in enumerate(positions)]
    if not columns:
        return ArrowBatch.from_records(records, positions, shard="00", segment="s")
    table = pa.Table.from_pylist(
        records, schema=pa.schema([("id", pa.string()), ("n", pa.int64())])
    )
    return ArrowBatch(
        table,
        pa.array(positions, pa.string()),
        shard="00",
        segment="s",
        json=lambda: pa.array([f'{{"id":"{p}"}}' for p in positions]),
    )


@given(
    st.lists(st.integers(0, 10_000), unique=True, max_size=40).map(sorted),
    st.integers(-1, 10_001),
    st.booleans(),
)
def test_after_keeps_exactly_the_events_above_the_position(
    numbers: list[int], floor: int, columns: bool
) -> None:
    positions = [f"p{n:05d}" for n in numbers]
    cut = f"p{floor:05d}" if floor >= 0 else ""
    tail = batch(positions, columns=columns).after(cut)
    kept = [p for p in positions if p > cut]
    assert tail.positions.to_pylist() == kept
    assert [r["id"] for r in tail.dicts()] == kept
    if columns:  # made from the whole batch's JSON, then cut
        assert tail.json().to_pylist() == [f'{{"id":"{p}"}}' for p in kept]
    assert tail.shard == "00" and tail.segment == "s"


def test_after_slices_what_was_made_already() -> None:
    whole = batch(["a", "b", "c"], columns=True)
    whole.json()
    tail = whole.after("a")
    assert tail.json().to_pylist() == ['{"id":"b"}', '{"id":"c"}']
    assert tail.records.column("n").to_pylist() == [1, 2]
    assert whole.after("") is whole and len(whole.after("c")) == 0
