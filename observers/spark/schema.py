"""The change log's columns, and change events turned into a `pyarrow.Table` with exactly them.

The schema is explicit (never inferred), so every batch has the same column types whatever the
events carried, Spark gets Arrow data as is, and any Parquet reader sees one schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa

from observers.protocol import ChangeEvent

TIMESTAMP = pa.timestamp("us", tz="UTC")

CHANGES_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("event_type", pa.string(), nullable=False),
        pa.field("event_time", TIMESTAMP, nullable=False),
        pa.field("container", pa.string(), nullable=False),
        pa.field("blob", pa.string(), nullable=False),
        pa.field("sequencer", pa.string(), nullable=False),
        pa.field("api", pa.string()),
        pa.field("etag", pa.string()),
        pa.field("content_length", pa.int64()),
        pa.field("content_type", pa.string()),
        pa.field("blob_type", pa.string()),
        pa.field("tier", pa.string()),
        pa.field("snapshot", pa.string()),
        pa.field("version", pa.string()),
        pa.field("schema_version", pa.int64()),
        pa.field("shard", pa.string(), nullable=False),
        pa.field("segment", TIMESTAMP, nullable=False),
        pa.field("position", pa.string(), nullable=False),
        pa.field("raw", pa.string(), nullable=False),
    ]
)
"""One row per event. `position` orders the events of one shard (see `event_key`); `raw` is the
record as decoded, as JSON. `segment` is the begin time of the event's segment."""

_DATA_COLUMNS = {  # column -> field of the record's `data`
    "api": "api",
    "etag": "etag",
    "content_length": "contentLength",
    "content_type": "contentType",
    "blob_type": "blobType",
    "tier": "blobTier",
    "snapshot": "snapshot",
    "version": "blobVersion",
}


def segment_begin(segment: str) -> datetime:
    """`idx/segments/2026/01/01/0100/meta.json` -> 2026-01-01 01:00 UTC."""
    parts = segment.removeprefix("idx/segments/").removesuffix("/meta.json").split("/")
    year, month, day, hhmm = (int(p) for p in parts)
    return datetime(year, month, day, hhmm // 100, hhmm % 100, tzinfo=UTC)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def changes_table(events: Sequence[ChangeEvent]) -> pa.Table:
    """The events as rows of `CHANGES_SCHEMA`, in the order given."""
    columns: dict[str, list[Any]] = {name: [] for name in CHANGES_SCHEMA.names}
    segments: dict[str, datetime] = {}
    for e in events:
        data: Mapping[str, Any] = e.raw.get("data") or {}
        columns["id"].append(e.id)
        columns["event_type"].append(e.event_type)
        columns["event_time"].append(e.event_time)
        columns["container"].append(e.container)
        columns["blob"].append(e.blob)
        columns["sequencer"].append(e.sequencer)
        for column, name in _DATA_COLUMNS.items():
            value = data.get(name)
            columns[column].append(value if value != "" else None)
        columns["schema_version"].append(e.raw.get("schemaVersion"))
        columns["shard"].append(e.shard)
        begin = segments.get(e.segment)
        if begin is None:
            begin = segments[e.segment] = segment_begin(e.segment)
        columns["segment"].append(begin)
        columns["position"].append(e.position)
        columns["raw"].append(orjson.dumps(e.raw, default=_json_default).decode())
    return pa.Table.from_pydict(columns, schema=CHANGES_SCHEMA)
