"""The envelope of an event, its formats, and the change log's envelope columns agree."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from observers.envelope import BACKFILL_EVENT, Op, ReadMethod
from observers.events import changes_table
from observers.formats import Format, render
from observers.origin import Origin
from observers.protocol import ChangeEvent, EventBatch
from tests.format_shapes import CHECKS

SEGMENT = "idx/segments/2026/01/01/0100/meta.json"
READ_AT = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)


def record(event_type: str, n: int = 1, **data: object) -> dict[str, object]:
    return {
        "schemaVersion": 5,
        "subject": f"/blobServices/default/containers/c/blobs/dir/b{n}.txt",
        "eventType": event_type,
        "eventTime": "2026-01-01T01:00:00.1234567Z",
        "id": f"id-{event_type}-{n}",
        "data": {"api": "PutBlob", "sequencer": f"{n:016x}", "etag": "0x1", **data},
    }


def event(raw: dict[str, object]) -> ChangeEvent:
    return ChangeEvent.from_raw(raw, position="p", origin=Origin("02", SEGMENT, "proc", READ_AT))


KINDS = [
    record("BlobCreated", contentLength=5, contentType="text/plain", blobType="BlockBlob"),
    record("BlobDeleted", 2),
    record("BlobTierChanged", 3, blobTier="Cool"),
    record("BlobTagsUpdated", 4, blobTagsUpdated={"current": {"a": "1"}}),
    record(BACKFILL_EVENT, 5, contentLength=9),
]


def test_the_envelope_is_the_event_normalised() -> None:
    created = event(KINDS[0]).envelope()
    assert (created.stream_name, created.object, created.key) == ("proc", "c", "dir/b1.txt")
    assert (created.op, created.read_method, created.uuid) == (
        Op.UPSERT,
        ReadMethod.CHANGE_FEED,
        "id-BlobCreated-1",
    )
    assert created.source_timestamp == datetime(2026, 1, 1, 1, 0, 0, 123456, tzinfo=UTC)
    assert created.read_timestamp == READ_AT
    assert created.sort_keys == ("1", f"{1:016x}", "id-BlobCreated-1")
    assert created.payload is KINDS[0]
    assert event(KINDS[1]).envelope().op is Op.DELETE
    backfill = event(KINDS[4]).envelope()
    assert backfill.read_method is ReadMethod.BACKFILL and backfill.sort_keys[0] == "0"
    # a backfill sorts before every change of the same blob, whatever their sequencers
    assert backfill.sort_keys < event(record("BlobCreated", 0)).envelope().sort_keys


@pytest.mark.parametrize("raw", KINDS, ids=lambda r: str(r["eventType"]))
@pytest.mark.parametrize("fmt", ["envelope", "debezium", "ydb"])
def test_every_kind_of_event_has_the_documented_shape(raw: dict[str, object], fmt: str) -> None:
    doc = render(event(raw), Format(fmt))
    CHECKS[fmt](doc)


def test_debezium_and_ydb_say_what_happened() -> None:
    ops = [render(event(r), Format.DEBEZIUM)["payload"]["op"] for r in KINDS]
    assert ops == ["c", "d", "u", "u", "r"]
    deleted = render(event(KINDS[1]), Format.DEBEZIUM)["payload"]
    assert deleted["after"] is None and deleted["before"]["blob"] == "dir/b2.txt"
    tier = render(event(KINDS[2]), Format.YDB)
    assert tier["newImage"]["tier"] == "Cool" and tier["key"] == ["c", "dir/b3.txt"]
    assert render(event(KINDS[1]), Format.YDB)["erase"] == {}
    tags = render(event(KINDS[3]), Format.DEBEZIUM)["payload"]["after"]
    assert tags["tags"] == {"a": "1"} and tags["etag"] == "0x1"
    assert render(event(KINDS[0]), Format.NATIVE) is KINDS[0]


def test_the_change_log_carries_the_envelope() -> None:
    batch = EventBatch.from_records(
        KINDS,
        [f"p{i}" for i in range(len(KINDS))],
        Origin("02", SEGMENT, "proc", READ_AT),
    )
    rows = changes_table(batch).to_pylist()
    for row, e in zip(rows, batch, strict=True):
        envelope = e.envelope()
        assert row["stream_name"] == envelope.stream_name
        assert row["read_method"] == envelope.read_method.value
        assert row["op"] == envelope.op.value
        assert row["read_timestamp"] == envelope.read_timestamp
        assert tuple(row["sort_keys"]) == envelope.sort_keys
        assert (row["container"], row["blob"], row["id"]) == (
            envelope.object,
            envelope.key,
            envelope.uuid,
        )
        assert row["event_time"] == envelope.source_timestamp
    # the same columns from events that are not a batch
    assert changes_table(list(batch)).to_pylist() == rows
