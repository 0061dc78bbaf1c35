"""The change log's columns, and a lease's batch turned into a `pyarrow.Table` with exactly them:
the table `process_arrow` observers get, and the Spark observer writes.

The schema is explicit (never inferred), so every batch has the same column types whatever the
events carried, Spark gets Arrow data as is, and any Parquet reader sees one schema.

Rows are built column-wise with Arrow compute, from the decoded records as Arrow columns
(`arrow_changes`: whatever the chunk's schema version, enums as text, a field it lacks as
nulls) or from records as Python dicts (`records_table`: the initial scan's, and tests'). The
values are exactly those `ChangeEvent.from_raw` gives (tested on recorded feeds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from observers.envelope import (
    BACKFILL_EVENT,
    DELETE_EVENTS,
    PROPERTY_FIELDS,
    Op,
    ReadMethod,
)
from observers.errors import BadEventError
from observers.origin import Origin
from observers.subject import subject_parts

TIMESTAMP = pa.timestamp("us", tz="UTC")
TAGS = pa.map_(pa.string(), pa.string())

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
        pa.field("tags", TAGS),
        pa.field("schema_version", pa.int64()),
        pa.field("shard", pa.string(), nullable=False),
        pa.field("segment", TIMESTAMP, nullable=False),
        pa.field("position", pa.string(), nullable=False),
        pa.field("raw", pa.string(), nullable=False),
        pa.field("stream_name", pa.string(), nullable=False),
        pa.field("read_method", pa.string(), nullable=False),
        pa.field("op", pa.string(), nullable=False),
        pa.field("read_timestamp", TIMESTAMP, nullable=False),
        pa.field("sort_keys", pa.list_(pa.string()), nullable=False),
    ]
)
"""One row per event. `position` orders the events of one shard (see `event_position`); `raw` is the
record as decoded, as JSON. `shard`, `segment` (the begin time of the event's segment),
`stream_name` and `read_timestamp` are the batch's `Origin` (`observers.origin`). `tags` are the
blob's index tags after a tag change (`data.blobTagsUpdated.current`, schema v5+), else null.
The last five columns are the envelope's (`observers.envelope`); its other fields are columns
under their change log names: object = container, key = blob, uuid = id, source_timestamp =
event_time, payload = raw."""

_DATA_COLUMNS = {"api": "api", **PROPERTY_FIELDS}  # column -> field of the record's `data`
_STRING = pa.string()
_EMPTY = pa.scalar("", _STRING)
_DATA = pa.struct(
    [
        *(
            pa.field(name, CHANGES_SCHEMA.field(column).type)
            for column, name in _DATA_COLUMNS.items()
        ),
        pa.field("sequencer", _STRING),
        pa.field("blobTagsUpdated", pa.struct([pa.field("current", TAGS)])),
    ]
)
_RECORD = pa.struct(
    [
        pa.field("schemaVersion", pa.int64()),
        pa.field("subject", _STRING),
        pa.field("eventType", _STRING),
        pa.field("eventTime", _STRING),
        pa.field("id", _STRING),
        pa.field("data", _DATA),
    ]
)
"""The fields of a record the typed columns come from; other fields only go into `raw`."""


def arrow_changes(
    records: pa.Table,
    positions: pa.Array,
    raw: pa.Array,
    origin: Origin,
) -> pa.Table:
    """Decoded records as Arrow columns (one row each, as the chunk's writer schema gives them;
    their `positions`, their JSON `raw` and the batch's `origin`) as rows of `CHANGES_SCHEMA`.

    Errors: `BadEventError` when a record has no readable `eventTime`."""
    parsed = records.combine_chunks().to_struct_array().combine_chunks()
    return _rows(parsed, _strings(positions), _strings(raw), origin)


def records_table(
    records: Sequence[Mapping[str, Any]],
    positions: Sequence[str],
    origin: Origin | Sequence[Origin],
) -> pa.Table:
    """Decoded records as Python dicts (with their positions and their origin: the batch's, or
    one per record) as rows of `CHANGES_SCHEMA`."""
    return _rows(_record_array(records), pa.array(positions, _STRING), json_column(records), origin)


def _rows(
    parsed: pa.StructArray,
    positions: pa.Array,
    raw: pa.Array,
    origin: Origin | Sequence[Origin],
) -> pa.Table:
    n = len(parsed)
    if len(positions) != n:
        raise ValueError(f"{n} records but {len(positions)} positions")
    data = _field(parsed, "data")
    subject = _typed(_field(parsed, "subject"), _STRING, n)
    where = subject_parts(pc.fill_null(subject, _EMPTY))
    columns: dict[str, pa.Array] = {
        "id": _text(_typed(_field(parsed, "id"), _STRING, n)),
        "event_type": _text(_typed(_field(parsed, "eventType"), _STRING, n)),
        "event_time": _event_times(_typed(_field(parsed, "eventTime"), _STRING, n), positions),
        "container": _text(_field(where, "container")),
        "blob": _text(_field(where, "blob")),
        "sequencer": _text(_typed(_field(data, "sequencer"), _STRING, n)),
    }
    for column, name in _DATA_COLUMNS.items():
        value = _typed(_field(data, name), CHANGES_SCHEMA.field(column).type, n)
        if pa.types.is_string(value.type):  # "" means absent, as in the service's records
            empty = pc.equal(value, _EMPTY)
            if empty.true_count:
                value = pc.if_else(empty, pa.scalar(None, _STRING), value)
        columns[column] = value
    columns["tags"] = _current_tags(_field(data, "blobTagsUpdated"), n)
    columns["schema_version"] = _typed(_field(parsed, "schemaVersion"), pa.int64(), n)
    columns["position"] = positions
    columns["raw"] = raw
    columns.update(_origin_columns(origin, n))
    hints = origin.provisional if isinstance(origin, Origin) else False
    columns.update(_envelope_columns(columns, n, hints=hints))
    return pa.Table.from_arrays(
        [columns[name] for name in CHANGES_SCHEMA.names], schema=CHANGES_SCHEMA
    )


def _origin_columns(origin: Origin | Sequence[Origin], n: int) -> dict[str, pa.Array]:
    """The origin's four columns: one value repeated, or one origin per row."""
    if isinstance(origin, Origin):
        return {
            "shard": pa.repeat(pa.scalar(origin.lease, _STRING), n),
            "segment": pa.repeat(pa.scalar(origin.segment_begin, TIMESTAMP), n),
            "stream_name": pa.repeat(pa.scalar(origin.processor, _STRING), n),
            "read_timestamp": pa.repeat(pa.scalar(origin.read_at, TIMESTAMP), n),
        }
    if len(origin) != n:
        raise ValueError(f"{n} records but {len(origin)} origins")
    return {
        "shard": pa.array([o.lease for o in origin], _STRING),
        "segment": pa.array([o.segment_begin for o in origin], TIMESTAMP),
        "stream_name": pa.array([o.processor for o in origin], _STRING),
        "read_timestamp": pa.array([o.read_at for o in origin], TIMESTAMP),
    }


def _envelope_columns(
    columns: Mapping[str, pa.Array], n: int, *, hints: bool = False
) -> dict[str, pa.Array]:
    """The envelope's own columns, as `ChangeEvent.envelope()` gives them, column-wise (a
    batch of `hints` reads them all as hints)."""
    event_type = columns["event_type"]
    backfill = pc.equal(event_type, _text_scalar(BACKFILL_EVENT))
    method = pc.if_else(
        backfill,
        _text_scalar(ReadMethod.BACKFILL.value),
        _text_scalar((ReadMethod.HINT if hints else ReadMethod.CHANGE_FEED).value),
    )
    deleted = pc.is_in(event_type, value_set=pa.array(sorted(DELETE_EVENTS), _STRING))
    rank = pc.if_else(backfill, _text_scalar("0"), _text_scalar("1"))
    # sort_keys: [rank, sequencer, id] per row, interleaved from three columns in one take
    parts = pa.concat_arrays([rank, columns["sequencer"], columns["id"]])
    order = np.arange(3 * n, dtype=np.int64).reshape(3, n).T.ravel()
    keys = pa.ListArray.from_arrays(
        pa.array(np.arange(0, 3 * n + 1, 3, dtype=np.int32), pa.int32()),
        parts.take(pa.array(order, pa.int64())),
    )
    return {
        "read_method": method,
        "op": pc.if_else(deleted, _text_scalar(Op.DELETE.value), _text_scalar(Op.UPSERT.value)),
        "sort_keys": keys,
    }


def _record_array(records: Sequence[Mapping[str, Any]]) -> pa.StructArray:
    """The typed fields of every record; a record whose fields have unexpected types (a future
    schema version, say) is coerced field by field instead of failing the batch."""
    try:
        return pa.array(records, type=_RECORD)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([_coerced(r, _RECORD) for r in records], type=_RECORD)


def _coerced(value: object, kind: pa.DataType) -> Any:
    """`value` as a Python value of Arrow type `kind`; None when it cannot be one."""
    if value is None:
        return None
    if pa.types.is_struct(kind):
        if not isinstance(value, Mapping):
            return None
        return {f.name: _coerced(value.get(f.name), f.type) for f in kind}
    if pa.types.is_map(kind):
        if not isinstance(value, Mapping):
            return None
        return {str(k): None if v is None else str(v) for k, v in value.items()}
    if pa.types.is_integer(kind):
        try:
            return int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            return None
    return value if isinstance(value, str) else str(value)


def _field(values: pa.Array | None, name: str) -> pa.Array | None:
    """A struct's child, null where the struct is; None when it has no such child (a field of
    a later schema version). `.field()` alone ignores the parent's nulls; the kernel that does
    not costs more, so it runs only when there are some."""
    if values is None or not pa.types.is_struct(values.type):
        return None
    if values.type.get_field_index(name) < 0:
        return None
    return values.field(name) if values.null_count == 0 else pc.struct_field(values, name)


def _typed(values: pa.Array | None, kind: pa.DataType, n: int) -> pa.Array:
    """`values` as Arrow type `kind`: enum symbols decoded, wide strings narrowed; nulls where
    the field is absent or cannot be that type (as `_coerced` does with Python values)."""
    if values is None:
        return pa.nulls(n, kind)
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if values.type == kind:
        return values
    try:
        return pc.cast(values, kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return pa.nulls(n, kind)


def _current_tags(tagged: pa.Array | None, n: int) -> pa.Array:
    """`data.blobTagsUpdated.current`: a map of maps as decoded from Avro, or a struct as made
    from Python dicts."""
    if tagged is not None and pa.types.is_map(tagged.type):
        key = pa.scalar("current", tagged.type.key_type)
        return _typed(pc.map_lookup(tagged, key, "first"), TAGS, n)
    return _typed(_field(tagged, "current"), TAGS, n)


def _strings(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column of text as `string` (what the change log holds; at most 2 GiB a batch)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values if values.type == _STRING else values.cast(_STRING)


def _text(values: pa.Array | None) -> pa.Array:
    return pc.fill_null(values, _EMPTY)


def _text_scalar(value: str) -> pa.Scalar:
    """A typed scalar: pyarrow imports pandas (1-2 s) to infer the type of an untyped one."""
    return pa.scalar(value, _STRING)


def _event_times(texts: pa.Array, positions: pa.Array) -> pa.Array:
    """ISO 8601 event times as UTC microseconds; times without an offset are UTC."""
    try:
        exact = pc.cast(texts, pa.timestamp("ns", tz="UTC"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # no offset, or not ISO 8601
        pairs = zip(texts.to_pylist(), positions.to_pylist(), strict=True)
        return pa.array([_parse_time(text, at) for text, at in pairs], TIMESTAMP)
    if exact.null_count:
        index = pc.index(pc.is_null(exact), True).as_py()
        raise BadEventError(f"event at {positions[index].as_py()}: no eventTime")
    return pc.cast(exact, TIMESTAMP, safe=False)  # truncated to microseconds, like datetime


def _parse_time(text: str | None, position: str) -> datetime:
    try:
        when = datetime.fromisoformat(str(text))
    except ValueError as e:
        raise BadEventError(f"event at {position}: eventTime {text!r}: {e}") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def json_column(records: Sequence[Mapping[str, Any]]) -> pa.Array:
    """Each record as JSON, built as one buffer (orjson writes valid UTF-8)."""
    texts = [orjson.dumps(r, default=_json_default) for r in records]
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)), out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:  # a string column holds at most 2 GiB
        raise BadEventError(f"{len(texts)} records of {offsets[-1]} bytes of JSON in one batch")
    return pa.StringArray.from_buffers(
        len(texts), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(texts))
    )
