"""Change events as Arrow rows with the change log's explicit schema."""

from __future__ import annotations

from datetime import UTC, datetime

import fastavro
import orjson
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from observers.changes import CHANGES_SCHEMA
from observers.errors import BadEventError
from observers.events import changes_table
from observers.origin import Origin
from observers.protocol import ChangeEvent, EventBatch
from tests.fixtures import RECORDED_CHUNKS

SEGMENT = "idx/segments/2026/01/01/0100/meta.json"


def record(n: int, **data: object) -> dict[str, object]:
    return {
        "schemaVersion": 6,
        "topic": "/subscriptions/x",
        "subject": f"/blobServices/default/containers/c{n}/blobs/dir/b{n}.txt",
        "eventType": "BlobCreated",
        "eventTime": f"2026-01-01T01:0{n}:00.1234567Z",
        "id": f"id-{n}",
        "data": {"api": "PutBlob", "sequencer": f"{n:016x}", "etag": "", **data},
    }


def test_rows_carry_typed_columns_and_the_raw_record() -> None:
    raws = [
        record(1, contentLength=12, contentType="text/plain", blobType="BlockBlob"),
        record(2, blobTier="Cool", snapshot=None, blobVersion="v2"),
    ]
    events = [
        ChangeEvent.from_raw(r, position=f"p{i}", origin=Origin("03", SEGMENT))
        for i, r in enumerate(raws)
    ]
    table = changes_table(events)
    assert table.schema == CHANGES_SCHEMA
    rows = table.to_pylist()
    assert rows[0]["event_time"] == datetime(2026, 1, 1, 1, 1, 0, 123456, tzinfo=UTC)
    assert (rows[0]["container"], rows[0]["blob"]) == ("c1", "dir/b1.txt")
    assert (rows[0]["content_length"], rows[0]["content_type"]) == (12, "text/plain")
    assert rows[0]["etag"] is None  # empty strings become nulls
    assert (rows[1]["tier"], rows[1]["version"], rows[1]["snapshot"]) == ("Cool", "v2", None)
    assert rows[1]["content_length"] is None
    assert rows[1]["segment"] == datetime(2026, 1, 1, 1, 0, tzinfo=UTC)
    assert [r["position"] for r in rows] == ["p0", "p1"]
    assert [r["shard"] for r in rows] == ["03", "03"]
    assert [orjson.loads(r["raw"]) for r in rows] == raws


def test_an_empty_batch_still_has_the_schema() -> None:
    assert changes_table([]).schema == CHANGES_SCHEMA


def test_events_without_an_origin_are_refused_by_their_index() -> None:
    events = [
        ChangeEvent.from_raw(record(0), origin=Origin("00", SEGMENT)),
        ChangeEvent.from_raw(record(1)),
    ]
    with pytest.raises(ValueError, match="event 1 has no origin"):
        changes_table(events)


def _expected_columns(e: ChangeEvent) -> tuple[object, ...]:
    return (e.id, e.event_type, e.event_time, e.container, e.blob, e.sequencer)


def _columns(table: pa.Table) -> list[tuple[object, ...]]:
    names = ["id", "event_type", "event_time", "container", "blob", "sequencer"]
    return list(zip(*(table.column(n).to_pylist() for n in names), strict=True))


def test_recorded_records_convert_like_change_events() -> None:
    """Column-wise conversion of the service's own records gives what ChangeEvent gives."""
    for chunk in RECORDED_CHUNKS:
        with chunk.open("rb") as f:
            raws = list(fastavro.reader(f))
        positions = [f"p{i:06d}" for i in range(len(raws))]
        batch = EventBatch.from_records(raws, positions, Origin("00", SEGMENT))
        table = changes_table(batch)
        assert _columns(table) == [_expected_columns(e) for e in batch], chunk
        assert [orjson.loads(r) for r in table.column("raw").to_pylist()] == [
            orjson.loads(orjson.dumps(r, default=str)) for r in raws
        ]


subjects = st.one_of(
    st.builds(
        lambda c, b: f"/blobServices/default/containers/{c}/blobs/{b}",
        st.text(alphabet="abc-", min_size=1, max_size=5),
        st.text(alphabet="ab/ .%+界", max_size=12),
    ),
    st.text(max_size=20),
    st.just("/blobServices/default/containers/only-a-container"),
)
times = st.datetimes(
    min_value=datetime(2001, 1, 1), max_value=datetime(2099, 1, 1), timezones=st.just(UTC)
).map(lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "7Z")


@given(
    st.lists(
        st.fixed_dictionaries(
            {"subject": subjects, "eventTime": times, "id": st.text(max_size=8)},
            optional={
                "eventType": st.sampled_from(["BlobCreated", "BlobDeleted", "Future"]),
                "data": st.fixed_dictionaries(
                    {},
                    optional={
                        "sequencer": st.text(alphabet="0123456789abcdef", max_size=8),
                        "contentLength": st.one_of(st.integers(0, 2**40), st.just("12")),
                        "blobTier": st.one_of(st.just("Cool"), st.integers(0, 3)),
                    },
                ),
            },
        ),
        max_size=6,
    )
)
def test_any_records_convert_like_change_events(raws: list[dict[str, object]]) -> None:
    """Odd subjects, missing fields and fields of unexpected types (coerced, never failing)."""
    batch = EventBatch.from_records(
        raws, [f"p{i}" for i in range(len(raws))], Origin("07", SEGMENT)
    )
    table = changes_table(batch)
    assert table.schema == CHANGES_SCHEMA
    assert _columns(table) == [_expected_columns(e) for e in batch]


def test_times_without_an_offset_are_utc_and_bad_times_name_the_event() -> None:
    naive = {**record(1), "eventTime": "2026-01-01T01:01:00.5"}
    table = changes_table(EventBatch.from_records([naive], ["p0"], Origin("00", SEGMENT)))
    assert table.column("event_time")[0].as_py() == datetime(
        2026, 1, 1, 1, 1, 0, 500000, tzinfo=UTC
    )
    bad = {**record(2), "eventTime": "yesterday"}
    with pytest.raises(BadEventError, match="event at p1: eventTime 'yesterday'"):
        changes_table(
            EventBatch.from_records([record(1), bad], ["p0", "p1"], Origin("00", SEGMENT))
        )


def test_tags_after_a_tag_change() -> None:
    tagged = record(1, blobTagsUpdated={"previous": {}, "current": {"state": "done", "n": "3"}})
    table = changes_table(
        EventBatch.from_records([tagged, record(2)], ["p0", "p1"], Origin("0", SEGMENT))
    )
    assert table.column("tags").to_pylist() == [[("state", "done"), ("n", "3")], None]
