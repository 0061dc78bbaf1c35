"""What a lease's batch is made of: `ChangeEvent`s from raw records, `EventBatch` made lazily from
an `ArrowBatch`, and `ArrowBatch.after`, the tail of a batch above a position, in every form
the batch offers."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from observers import (
    ArrowBatch,
    ChangeEvent,
    EventBatch,
)
from observers.origin import Origin
from tests.unit.fakes import RAW


def batch(positions: list[str], *, columns: bool) -> ArrowBatch:
    records = [{"id": p, "n": i} for i, p in enumerate(positions)]
    if not columns:
        return ArrowBatch.from_records(records, positions, Origin("00", "s"))
    table = pa.Table.from_pylist(
        records, schema=pa.schema([("id", pa.string()), ("n", pa.int64())])
    )
    return ArrowBatch(
        table,
        pa.array(positions, pa.string()),
        Origin("00", "s"),
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
    assert tail.origin == Origin("00", "s", read_at=tail.origin.read_at)


def test_after_slices_what_was_made_already() -> None:
    whole = batch(["a", "b", "c"], columns=True)
    whole.json()
    tail = whole.after("a")
    assert tail.json().to_pylist() == ['{"id":"b"}', '{"id":"c"}']
    assert tail.records.column("n").to_pylist() == [1, 2]
    assert whole.after("") is whole and len(whole.after("c")) == 0


def test_change_event_from_a_raw_record() -> None:
    e = ChangeEvent.from_raw(RAW, origin=Origin("03", "idx/segments/2026/03/04/0500/meta.json"))
    assert (e.id, e.event_type, e.container, e.blob) == (
        "e-1",
        "BlobCreated",
        "photos",
        "2026/a b.jpg",
    )
    assert e.event_time == datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
    assert e.sequencer == RAW["data"]["sequencer"]  # type: ignore[index]
    assert e.raw is RAW and e.origin is not None and e.origin.lease == "03"


def test_an_event_batch_makes_the_same_events_lazily() -> None:
    other = {**RAW, "id": "e-2", "subject": "/blobServices/default/containers/c/blobs/x"}
    read_at = datetime(2026, 1, 1, tzinfo=UTC)
    batch = EventBatch.from_records(
        [RAW, other],
        ["p0", "p1"],
        Origin("03", "idx/s", "proc", read_at),
    )
    assert batch._events == [None, None]  # nothing made before it is asked for
    eager = [
        ChangeEvent.from_raw(r, position=p, origin=Origin("03", "idx/s", "proc", read_at))
        for r, p in ((RAW, "p0"), (other, "p1"))
    ]
    assert batch[1] == eager[1] and batch._events[0] is None
    assert list(batch) == eager and batch[:] == eager and batch[-1] == eager[1]
    assert batch[0] is batch[0]  # made once
    assert len(batch) == 2 and bool(EventBatch.from_records([], [], Origin("", ""))) is False
    with pytest.raises(ValueError, match="2 records but 1 positions"):
        EventBatch.from_records([RAW, other], ["p0"], Origin("03", "idx/s"))
