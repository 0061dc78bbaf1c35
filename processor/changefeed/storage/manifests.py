"""Parsing of the two JSON documents of the feed: `meta/segments.json` and a segment's `meta.json`.

Only the fields the reader depends on are checked; everything else (for example
`storageDiagnostics`, which the service documents as internal) is ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum

from processor.changefeed.errors import ManifestError
from processor.changefeed.storage.layout import checked_shard_prefix


class SegmentStatus(Enum):
    PUBLISHING = "Publishing"
    FINALIZED = "Finalized"


@dataclass(frozen=True, slots=True)
class FeedManifest:
    """`meta/segments.json`: segments that begin after `last_consumable` must not be read."""

    last_consumable: datetime | None


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    """One hourly segment: its status and one chunk-file prefix per shard."""

    path: str
    begin: datetime
    status: SegmentStatus
    shard_prefixes: tuple[str, ...]
    schema_version: int | None

    @property
    def is_finalized(self) -> bool:
        return self.status is SegmentStatus.FINALIZED


def parse_time(value: object, *, path: str, field: str) -> datetime:
    """An ISO-8601 time from a manifest, as an aware UTC datetime."""
    if not isinstance(value, str):
        raise ManifestError(path, f"field {field!r} is not a string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ManifestError(path, f"field {field!r} is not an ISO time: {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def _load_object(data: bytes, path: str) -> dict[str, object]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ManifestError(path, f"invalid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ManifestError(path, "not a JSON object")
    return doc


def parse_feed_manifest(data: bytes, *, path: str) -> FeedManifest:
    doc = _load_object(data, path)
    raw = doc.get("lastConsumable")
    if raw is None:
        return FeedManifest(last_consumable=None)
    return FeedManifest(last_consumable=parse_time(raw, path=path, field="lastConsumable"))


def parse_segment_manifest(data: bytes, *, path: str) -> SegmentManifest:
    """Parse and check a segment manifest.

    Raises:
        ManifestError: invalid JSON, a missing or mistyped field, an unknown status.
        UnsafePathError: a `chunkFilePaths` entry outside `$blobchangefeed/log/`.
    """
    doc = _load_object(data, path)
    for field in ("begin", "status", "chunkFilePaths"):
        if field not in doc:
            raise ManifestError(path, f"missing field {field!r}")
    begin = parse_time(doc["begin"], path=path, field="begin")
    try:
        status = SegmentStatus(doc["status"])
    except ValueError:
        raise ManifestError(path, f"unknown status {doc['status']!r}") from None
    entries = doc["chunkFilePaths"]
    if not isinstance(entries, list):
        raise ManifestError(path, "field 'chunkFilePaths' is not a list")
    prefixes = tuple(checked_shard_prefix(e, manifest=path) for e in entries)
    if len(set(prefixes)) != len(prefixes):
        raise ManifestError(path, "chunkFilePaths lists a shard twice")
    config = doc.get("config")
    version = config.get("formatSchemaVersion") if isinstance(config, dict) else None
    return SegmentManifest(
        path=path,
        begin=begin,
        status=status,
        shard_prefixes=prefixes,
        schema_version=version if isinstance(version, int) else None,
    )
