"""The documented shape of each `--format`, as checks: used on real output and on docs/observers.md's
examples, so the two cannot drift apart."""

from __future__ import annotations

from typing import Any

ROW = {
    "container", "blob", "etag", "content_length", "content_type", "blob_type", "tier",
    "version", "snapshot", "tags",
}  # fmt: skip
IMAGE = ROW - {"container", "blob"}
ENVELOPE = {
    "stream_name", "read_method", "object", "key", "op", "uuid", "source_timestamp",
    "read_timestamp", "sort_keys", "source_metadata", "payload",
}  # fmt: skip
SOURCE = {
    "version", "connector", "name", "ts_ms", "snapshot", "container", "blob", "event_type",
    "event_id", "sequencer", "shard", "segment", "position",
}  # fmt: skip


def check_envelope(doc: dict[str, Any]) -> str:
    """The event id of a valid envelope; AssertionError naming what is off otherwise."""
    assert set(doc) == ENVELOPE, set(doc) ^ ENVELOPE
    assert doc["read_method"] in ("change-feed", "backfill")
    assert doc["op"] in ("upsert", "delete")
    assert doc["source_timestamp"].endswith("Z") and doc["read_timestamp"].endswith("Z")
    assert isinstance(doc["sort_keys"], list) and len(doc["sort_keys"]) == 3
    assert doc["sort_keys"][0] == ("0" if doc["read_method"] == "backfill" else "1")
    assert doc["source_metadata"]["is_deleted"] == (doc["op"] == "delete")
    assert doc["payload"]["id"] == doc["uuid"]
    return str(doc["uuid"])


def check_debezium(doc: dict[str, Any]) -> str:
    assert set(doc) == {"payload"}
    payload = doc["payload"]
    assert set(payload) == {"op", "before", "after", "source", "ts_ms"}
    op = payload["op"]
    assert op in ("c", "u", "d", "r")
    row = payload["before"] if op == "d" else payload["after"]
    assert payload["after" if op == "d" else "before"] is None
    assert set(row) == ROW, set(row) ^ ROW
    source = payload["source"]
    assert set(source) == SOURCE, set(source) ^ SOURCE
    assert source["snapshot"] == ("true" if op == "r" else "false")
    assert (source["container"], source["blob"]) == (row["container"], row["blob"])
    assert isinstance(payload["ts_ms"], int) and isinstance(source["ts_ms"], int)
    return str(source["event_id"])


def check_ydb(doc: dict[str, Any]) -> str:
    """The sequencer of a valid YDB record (YDB records carry no event id)."""
    key, ts = doc["key"], doc["ts"]
    assert isinstance(key, list) and len(key) == 2 and all(isinstance(k, str) for k in key)
    if "erase" in doc:
        assert set(doc) == {"key", "erase", "ts"} and doc["erase"] == {}
    else:
        assert set(doc) == {"key", "update", "newImage", "ts"} and doc["update"] == {}
        assert set(doc["newImage"]) == IMAGE, set(doc["newImage"]) ^ IMAGE
    assert isinstance(ts, list) and len(ts) == 2 and isinstance(ts[0], int)
    return str(ts[1])


CHECKS = {"envelope": check_envelope, "debezium": check_debezium, "ydb": check_ydb}
