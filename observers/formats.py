"""The JSON shapes an event can be written in (`--format` of `cfp read` and the jsonl observer).

- `native`: the record exactly as decoded from the change feed.
- `envelope`: the normalised view (`ChangeEvent.envelope()`).
- `debezium`: a Debezium change event as its JSON converter writes it without schemas:
  `{"payload": {"op", "before", "after", "source", "ts_ms"}}`, with the blob's properties as
  the row (`c` create, `u` any other change, `d` delete, `r` a backfill read by the scan).
- `ydb`: a YDB changefeed record in `NEW_IMAGE` mode: `{"key": [container, blob], "update": {},
  "newImage": {...}, "ts": [...]}`, or `"erase": {}` without an image for a delete.

Pure functions of the event; the README shows one example of each.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from observers.envelope import Op, ReadMethod, epoch_ms
from observers.protocol import ChangeEvent

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


def debezium(event: ChangeEvent) -> dict[str, Any]:
    row = {"container": event.container, "blob": event.blob, **event.properties()}
    deleted = event.op is Op.DELETE
    return {
        "payload": {
            "op": _debezium_op(event),
            "before": row if deleted else None,
            "after": None if deleted else row,
            "source": {
                "version": _version(),
                "connector": CONNECTOR,
                "name": event.stream_name,
                "ts_ms": epoch_ms(event.event_time),
                "snapshot": "true" if event.read_method is ReadMethod.BACKFILL else "false",
                "container": event.container,
                "blob": event.blob,
                "event_type": event.event_type,
                "event_id": event.id,
                "sequencer": event.sequencer,
                "shard": event.shard,
                "segment": event.segment,
                "position": event.position,
            },
            "ts_ms": epoch_ms(event.read_timestamp or datetime.now(UTC)),
        }
    }


def _debezium_op(event: ChangeEvent) -> str:
    if event.read_method is ReadMethod.BACKFILL:
        return "r"
    if event.op is Op.DELETE:
        return "d"
    return "c" if event.event_type == "BlobCreated" else "u"


def ydb(event: ChangeEvent) -> dict[str, Any]:
    doc: dict[str, Any] = {"key": [event.container, event.blob]}
    if event.op is Op.DELETE:
        doc["erase"] = {}
    else:
        doc["update"] = {}
        doc["newImage"] = event.properties()
    doc["ts"] = [epoch_ms(event.event_time), event.sequencer]
    return doc


@cache
def _version() -> str:
    try:
        return version("changefeed-processor")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"
