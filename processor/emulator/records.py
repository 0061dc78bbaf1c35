"""Building the change feed record of one performed operation, for a given schema version."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from processor.emulator.schemas import data_fields
from processor.emulator.workload import Op, OpKind

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

API_AND_EVENT: dict[OpKind, tuple[str, str]] = {
    OpKind.CREATE: ("PutBlob", "BlobCreated"),
    OpKind.DELETE: ("DeleteBlob", "BlobDeleted"),
    OpKind.SET_METADATA: ("SetBlobMetadata", "BlobPropertiesUpdated"),
    OpKind.SET_PROPERTIES: ("SetBlobProperties", "BlobPropertiesUpdated"),
    OpKind.SNAPSHOT: ("SnapshotBlob", "BlobSnapshotCreated"),
    OpKind.SET_TIER: ("SetBlobTier", "BlobTierChanged"),
    OpKind.SET_TAGS: ("SetBlobTags", "BlobPropertiesUpdated"),
}


@dataclass(frozen=True, slots=True)
class Outcome:
    """What storage answered for a performed operation."""

    etag: str
    content_length: int
    content_type: str
    request_id: str
    snapshot: str | None = None


def event_time_text(t: datetime) -> str:
    """`eventTime` as the service writes it: seven fractional digits and `Z`."""
    t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}0Z"


def sequencer(t: datetime, counter: int) -> str:
    """A sequencer that sorts as strings in the order events were made (same width, hex)."""
    ticks = int((t - EPOCH).total_seconds() * 10_000_000)
    return f"{0:016X}{ticks:016X}{counter:016x}"


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


class RecordFactory:
    """Makes records of one schema version for one account; ids come from the seeded rng."""

    def __init__(
        self, *, version: int, account: str, blob_endpoint: str, rng: random.Random
    ) -> None:
        self.version = version
        self._fields = data_fields(version)
        self._account = account
        self._endpoint = blob_endpoint.rstrip("/")
        self._rng = rng
        self._topic = (
            f"/subscriptions/{_uuid(rng)}/resourceGroups/cfp-emulator/providers/"
            f"Microsoft.Storage/storageAccounts/{account}"
        )

    def _envelope(self, *, subject: str, event_type: str, at: datetime) -> dict[str, Any]:
        return {
            "schemaVersion": self.version,
            "topic": self._topic,
            "subject": subject,
            "eventType": event_type,
            "eventTime": event_time_text(at),
            "id": _uuid(self._rng),
        }

    def _diagnostics(self, counter: int) -> dict[str, str]:
        return {"bid": _uuid(self._rng), "sid": _uuid(self._rng), "seq": f"({counter},0,0,0)"}

    def blob_event(self, op: Op, out: Outcome, *, at: datetime, counter: int) -> dict[str, Any]:
        api, event_type = API_AND_EVENT[op.kind]
        data: dict[str, Any] = {
            "api": api,
            "clientRequestId": _uuid(self._rng),
            "requestId": out.request_id or _uuid(self._rng),
            "etag": out.etag,
            "contentType": out.content_type,
            "contentLength": out.content_length,
            "blobType": "BlockBlob",
            "url": f"{self._endpoint}/{op.container}/{quote(op.name)}",
            "sequencer": sequencer(at, counter),
            "storageDiagnostics": self._diagnostics(counter),
        }
        optional: dict[str, Any] = {
            "blobVersion": None,
            "containerVersion": None,
            "blobTier": op.tier or None if op.kind is OpKind.SET_TIER else None,
            "previousInfo": None,
            "snapshot": out.snapshot,
            "blobPropertiesUpdated": None,
            "asyncOperationInfo": None,
            "blobTagsUpdated": None,
            "restorePointMarker": None,
            "contentOffset": None,
            "createTime": None,
        }
        prev = op.previous
        if op.kind is OpKind.SET_PROPERTIES and prev is not None:
            optional["blobPropertiesUpdated"] = {
                "ContentType": {"current": op.content_type, "previous": prev.content_type}
            }
        if op.kind is OpKind.SET_TIER and prev is not None:
            optional["previousInfo"] = {"PreviousTier": prev.tier}
        if op.kind is OpKind.SET_TAGS and prev is not None:
            optional["blobTagsUpdated"] = {"previous": prev.tags, "current": dict(op.tags)}
        data.update({k: v for k, v in optional.items() if k in self._fields})
        subject = f"/blobServices/default/containers/{op.container}/blobs/{op.name}"
        return {**self._envelope(subject=subject, event_type=event_type, at=at), "data": data}

    def control_event(self, *, at: datetime, counter: int) -> dict[str, Any]:
        """An internal `Control` record like those the service mixes into shards."""
        data: dict[str, Any] = {
            "api": "ControlEvent",
            "clientRequestId": "",
            "requestId": _uuid(self._rng),
            "etag": "0xFFFFFFFFFFFFFFF",
            "contentType": "control/internal",
            "contentLength": 0,
            "blobType": "UnspecifiedBlobType",
            "url": "",
            "sequencer": sequencer(at, counter),
            "storageDiagnostics": {**self._diagnostics(counter), "lid": "0", "lcx": "0"},
        }
        for name in ("blobVersion", "containerVersion", "blobTier", "previousInfo", "snapshot"):
            if name in self._fields:
                data[name] = None
        subject = "/blobServices/default/containers/$blobchangefeed/blobs/meta/segments.json"
        return {**self._envelope(subject=subject, event_type="Control", at=at), "data": data}
