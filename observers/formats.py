"""The JSON shapes an event can be written in (`--format` of `cfp read` and the jsonl observer).

- `native`: the record exactly as decoded from the change feed.
- `envelope`: the normalised view (`ChangeEvent.envelope()`).
- `debezium`: a Debezium change event as its JSON converter writes it without schemas:
  `{"payload": {"op", "before", "after", "source", "ts_ms"}}`, with the blob's properties as
  the row (`c` create, `u` any other change, `d` delete, `r` a backfill read by the scan).
- `ydb`: a YDB changefeed record in `NEW_IMAGE` mode: `{"key": [container, blob], "update": {},
  "newImage": {...}, "ts": [...]}`, or `"erase": {}` without an image for a delete.

`render` makes one event's document; `format_lines` makes the JSON lines of a whole batch from
its columns (the same documents byte for byte, tested), about ten times faster: the fields are
read column by column, only the documents themselves are Python objects, and each record's JSON
is embedded as it is. docs/observers.md shows one example of each.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from functools import cache
from itertools import starmap
from typing import Any, NamedTuple

import orjson

from observers.envelope import PROPERTY_FIELDS, Op, ReadMethod, envelope_document, epoch_ms
from observers.events import ArrowBatch, ChangeEvent
from observers.origin import Origin

_ISO_UTC = "%Y-%m-%dT%H:%M:%SZ"  # of microsecond timestamps: `iso_utc`'s shape
_PROPERTIES = (*PROPERTY_FIELDS, "tags")

CONNECTOR = "cfp-blob-changefeed"


class Format(StrEnum):
    NATIVE = "native"
    ENVELOPE = "envelope"
    DEBEZIUM = "debezium"
    YDB = "ydb"


def render(event: ChangeEvent, fmt: Format) -> Any:
    """`event` as a JSON-ready value in format `fmt`."""
    if fmt is Format.NATIVE:
        return event.raw
    if fmt is Format.ENVELOPE:
        return event.envelope().to_json()
    if fmt is Format.DEBEZIUM:
        return debezium(event)
    return ydb(event)


class DebeziumRow(NamedTuple):
    """One event's fields a Debezium change event is made of, in the order of the columns
    `format_lines` zips them from."""

    container: str
    blob: str
    properties: dict[str, Any]
    op: str
    read_method: str
    event_type: str
    stream_name: str
    event_ms: int
    read_ms: int
    event_id: str
    sequencer: str
    shard: str
    segment: str
    position: str


def debezium(event: ChangeEvent) -> dict[str, Any]:
    origin = event.origin or Origin("", "")
    return _debezium(
        DebeziumRow(
            event.container,
            event.blob,
            event.properties(),
            event.op.value,
            event.read_method.value,
            event.event_type,
            origin.processor,
            epoch_ms(event.event_time),
            epoch_ms(origin.read_at),
            event.id,
            event.sequencer,
            origin.lease,
            origin.segment_path,
            event.position,
        )
    )


def _debezium(r: DebeziumRow) -> dict[str, Any]:
    row = {"container": r.container, "blob": r.blob, **r.properties}
    deleted = r.op == Op.DELETE.value
    backfill = r.read_method == ReadMethod.BACKFILL.value
    return {
        "payload": {
            "op": "r" if backfill else "d" if deleted else _created_or_updated(r.event_type),
            "before": row if deleted else None,
            "after": None if deleted else row,
            "source": {
                "version": _version(),
                "connector": CONNECTOR,
                "name": r.stream_name,
                "ts_ms": r.event_ms,
                "snapshot": "true" if backfill else "false",
                "container": r.container,
                "blob": r.blob,
                "event_type": r.event_type,
                "event_id": r.event_id,
                "sequencer": r.sequencer,
                "shard": r.shard,
                "segment": r.segment,
                "position": r.position,
            },
            "ts_ms": r.read_ms,
        }
    }


def _created_or_updated(event_type: str) -> str:
    return "c" if event_type == "BlobCreated" else "u"


def ydb(event: ChangeEvent) -> dict[str, Any]:
    return _ydb(
        event.container,
        event.blob,
        event.op.value,
        event.properties(),
        epoch_ms(event.event_time),
        event.sequencer,
    )


def _ydb(
    container: str, blob: str, op: str, properties: dict[str, Any], event_ms: int, sequencer: str
) -> dict[str, Any]:
    doc: dict[str, Any] = {"key": [container, blob]}
    if op == Op.DELETE.value:
        doc["erase"] = {}
    else:
        doc["update"] = {}
        doc["newImage"] = properties
    doc["ts"] = [event_ms, sequencer]
    return doc


def format_lines(batch: ArrowBatch, fmt: Format) -> bytes:
    """The batch's events as JSON lines in `fmt`, from its columns: what `render` gives each
    event, a line each; a hint's document also says `"provisional": true`."""
    if fmt is Format.NATIVE:
        return b"".join(f"{text}\n".encode() for text in batch.json().to_pylist())
    c = _Columns(batch.changes())
    n = len(batch)
    lease, segment = batch.origin.lease, batch.origin.segment_path
    shards, segments = [lease] * n, [segment] * n
    documents: Iterator[dict[str, Any]]
    if fmt is Format.ENVELOPE:
        metadata = (
            {"event_type": kind, "sequencer": seq, "shard": lease,
             "segment": segment, "position": pos, "is_deleted": op == Op.DELETE.value}
            for kind, seq, pos, op in zip(
                c["event_type"], c["sequencer"], c["position"], c["op"], strict=True
            )
        )  # fmt: skip
        payloads = map(orjson.Fragment, batch.json().to_pylist())
        documents = starmap(envelope_document, zip(
            c["stream_name"], c["read_method"], c["container"], c["blob"], c["op"], c["id"],
            c.iso("event_time"), c.iso("read_timestamp"), c["sort_keys"], metadata, payloads,
            strict=True,
        ))  # fmt: skip
    elif fmt is Format.DEBEZIUM:
        documents = map(_debezium, starmap(DebeziumRow, zip(
            c["container"], c["blob"], c.properties(), c["op"], c["read_method"],
            c["event_type"], c["stream_name"], c.ms("event_time"), c.ms("read_timestamp"),
            c["id"], c["sequencer"], shards, segments, c["position"],
            strict=True,
        )))  # fmt: skip
    else:
        documents = starmap(_ydb, zip(
            c["container"], c["blob"], c["op"], c.properties(), c.ms("event_time"),
            c["sequencer"],
            strict=True,
        ))  # fmt: skip
    dump = orjson.dumps
    if batch.provisional:
        documents = ({**d, "provisional": True} for d in documents)
    return b"".join(dump(d, option=orjson.OPT_APPEND_NEWLINE) for d in documents)


class _Columns:
    """A batch's change log rows (`CHANGES_SCHEMA`), each column read into Python once."""

    def __init__(self, rows: Any) -> None:
        self._rows = rows
        self._read: dict[str, list[Any]] = {}

    def __getitem__(self, name: str) -> list[Any]:
        if name not in self._read:
            self._read[name] = self._rows.column(name).to_pylist(maps_as_pydicts="lossy")
        return self._read[name]

    def iso(self, name: str) -> list[str]:
        """A timestamp column as `iso_utc` writes each."""
        import pyarrow.compute as pc  # noqa: PLC0415 - with the first batch

        texts = pc.strftime(self._rows.column(name), format=_ISO_UTC)
        return texts.to_pylist()  # type: ignore[no-any-return]

    def ms(self, name: str) -> list[int]:
        """A timestamp column as `epoch_ms` gives each."""
        import pyarrow as pa  # noqa: PLC0415
        import pyarrow.compute as pc  # noqa: PLC0415

        micros = self._rows.column(name).cast(pa.int64())
        # not numpy's //: pyarrow's to_numpy imports pandas (1-2 s); the times are after 1970,
        # where Arrow's integer division (towards zero) is the same floor
        millis = pc.divide(micros, pa.scalar(1000, pa.int64()))
        return millis.to_pylist()  # type: ignore[no-any-return]

    def properties(self) -> list[dict[str, Any]]:
        """`ChangeEvent.properties()` of each row."""
        values = zip(*(self[name] for name in _PROPERTIES), strict=True)
        return [dict(zip(_PROPERTIES, row, strict=True)) for row in values]


@cache
def _version() -> str:
    # when first asked for: importlib.metadata costs `cfp read` 30 ms of its start otherwise
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("changefeed-processor")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"
