"""Change events as Arrow rows with the change log's explicit schema."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from observers.protocol import ChangeEvent
from observers.spark.schema import CHANGES_SCHEMA, changes_table, segment_begin

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
        ChangeEvent.from_raw(r, shard="03", segment=SEGMENT, position=f"p{i}")
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


def test_segment_begin_reads_the_manifest_path() -> None:
    assert segment_begin(SEGMENT) == datetime(2026, 1, 1, 1, 0, tzinfo=UTC)
