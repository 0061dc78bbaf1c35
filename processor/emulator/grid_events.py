"""The Blob Storage event Event Grid would publish for a change feed record, as a queue message
of a Storage Queue subscription (`cfp emulate --hints-queue`), in either delivery schema.

Azurite has no Event Grid: the emulator writes these messages itself, shaped as the documented
schema (`Microsoft.Storage.` event types, `eTag`, `topic` the account's resource id)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import orjson

GRID_EVENT_TYPES: Mapping[str, str] = {
    "BlobCreated": "BlobCreated",
    "BlobDeleted": "BlobDeleted",
    "BlobTierChanged": "BlobTierChanged",
    "BlobAsyncOperationInitiated": "AsyncOperationInitiated",
}
"""The feed's event types that Event Grid publishes too, under Event Grid's names; the others
(`BlobPropertiesUpdated`, `BlobSnapshotCreated`, `Control`) are the feed's alone."""

_DATA = ("api", "clientRequestId", "requestId", "contentType", "contentLength", "blobType")


def grid_event(record: Mapping[str, Any], *, cloud_events: bool = False) -> dict[str, Any] | None:
    """The event for `record` (a feed record as the emulator writes it), or None when Event
    Grid publishes none for its type."""
    kind = GRID_EVENT_TYPES.get(str(record.get("eventType")))
    if kind is None:
        return None
    feed_data = record.get("data") or {}
    data: dict[str, Any] = {name: feed_data.get(name) for name in _DATA if name in feed_data}
    if feed_data.get("etag") and record.get("eventType") != "BlobDeleted":
        data["eTag"] = feed_data["etag"]
    data["url"] = feed_data.get("url", "")
    data["sequencer"] = feed_data.get("sequencer")
    data["storageDiagnostics"] = {"batchId": (feed_data.get("storageDiagnostics") or {}).get("bid")}
    event_type = f"Microsoft.Storage.{kind}"
    if cloud_events:
        return {
            "source": record.get("topic"),
            "subject": record.get("subject"),
            "type": event_type,
            "time": record.get("eventTime"),
            "id": record.get("id"),
            "data": data,
            "specversion": "1.0",
        }
    return {
        "topic": record.get("topic"),
        "subject": record.get("subject"),
        "eventType": event_type,
        "eventTime": record.get("eventTime"),
        "id": record.get("id"),
        "data": data,
        "dataVersion": "",
        "metadataVersion": "1",
    }


def queue_text(event: Mapping[str, Any], *, encoded: bool = True) -> str:
    """A queue message's text for `event`: Base64 of its JSON, as Event Grid writes it, or the
    JSON itself (`encoded=False`, as some subscriptions were seen to)."""
    body = orjson.dumps(event)
    return base64.b64encode(body).decode() if encoded else body.decode()
