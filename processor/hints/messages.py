"""One queue message as Event Grid writes it, read into a hint, an event cfp ignores, or the
reason it is poison. Pure: no I/O, no clock.

Event Grid puts one event in a message, as Base64 of its JSON (the documented way) or as the
JSON itself (seen in the wild): both are read, Base64 strictly (a lenient decode turns raw JSON
into garbage instead of an error). Both delivery schemas are read: Event Grid's (`eventType`,
`topic`, `eventTime`) and CloudEvents 1.0 (`type`, `source`, `time`, `specversion`). A hint comes
out shaped as the change feed's record of the same change (`eventType` without its
`Microsoft.Storage.` prefix, `data.etag` unquoted), so observers read both alike.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import orjson

from observers.subject import split_subject

MAX_HINT_BYTES = 16 * 1024
"""The largest event accepted, as JSON (a Blob Storage event is about 1 KB; a queue message
holds at most 64 KiB)."""

EVENT_TYPE_PREFIX = "Microsoft.Storage."
FEED_EVENT_TYPES: Mapping[str, str] = {
    "BlobCreated": "BlobCreated",
    "BlobDeleted": "BlobDeleted",
    "BlobTierChanged": "BlobTierChanged",
    "AsyncOperationInitiated": "BlobAsyncOperationInitiated",
}
"""Event Grid's blob event types that the change feed also records, under the feed's names.
The others (renames and directories of HNS accounts, policy runs) have no feed record to
confirm them: they are ignored, not poison."""

_ACCOUNT = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Storage/"
    r"storageAccounts/(?P<account>[a-z0-9]{3,24})$",
    re.IGNORECASE,
)
_CONTAINER = re.compile(r"^(?:\$root|\$web|(?=[a-z0-9-]{3,63}$)[a-z0-9]+(?:-[a-z0-9]+)*)$")
_SEQUENCER = re.compile(r"^[0-9A-Fa-f]{16,64}$")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\\]")
_DATA_FIELDS = (  # Event Grid's `data` field -> the feed's name for it
    ("api", "api"),
    ("clientRequestId", "clientRequestId"),
    ("requestId", "requestId"),
    ("eTag", "etag"),
    ("contentType", "contentType"),
    ("contentLength", "contentLength"),
    ("blobType", "blobType"),
    ("sequencer", "sequencer"),
)


class PoisonReason(StrEnum):
    """Why a message cannot be a hint (the label of the poison counter, and the reason its
    copy in `<queue>-poison` gives)."""

    UNPARSABLE = "unparsable"  # neither JSON nor strict Base64 of JSON
    WRONG_SCHEMA = "wrong_schema"  # JSON, but no Blob Storage event of either schema
    TOO_LARGE = "too_large"  # more than MAX_HINT_BYTES of JSON
    OTHER_ACCOUNT = "other_account"  # the event's topic or source names another account
    ESCAPES_CONTAINER = "escapes_container"  # the subject leaves its container
    UNDELIVERABLE = "undeliverable"  # the observer did not accept it in its deliveries


@dataclass(frozen=True, slots=True)
class Hint:
    """A Blob Storage event as the change feed would record it (`record`), and where it is."""

    record: Mapping[str, Any]
    container: str
    blob: str
    sequencer: str
    event_time: datetime


@dataclass(frozen=True, slots=True)
class Ignored:
    """A valid Blob Storage event that the change feed never records (so no hint)."""

    event_type: str


@dataclass(frozen=True, slots=True)
class Poison:
    """A message that cannot be a hint, and why; `detail` names the field, never its value
    (a body may carry a SAS in a URL)."""

    reason: PoisonReason
    detail: str


Read = Hint | Ignored | Poison


def read_message(text: str, *, account: str) -> Read:
    """The hint in one message's text, for the storage account named `account`."""
    body = _decoded(text)
    if isinstance(body, Poison):
        return body
    if len(body) > MAX_HINT_BYTES:
        return Poison(
            PoisonReason.TOO_LARGE, f"{len(body)} bytes of JSON, at most {MAX_HINT_BYTES}"
        )
    try:
        event = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        return Poison(PoisonReason.UNPARSABLE, f"not JSON: {e.msg} at byte {e.pos}")
    if isinstance(event, list) and len(event) == 1:  # an array of one, as Event Hubs sends
        event = event[0]
    if not isinstance(event, dict):
        return Poison(PoisonReason.WRONG_SCHEMA, "not one JSON object")
    return _event(event, account.lower())


def _decoded(text: str) -> bytes | Poison:
    """The JSON bytes of a body: as is when it looks like JSON, else strict Base64 of it."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        return stripped.encode()
    if len(stripped) > 2 * MAX_HINT_BYTES:
        return Poison(PoisonReason.TOO_LARGE, f"{len(stripped)} characters of Base64")
    try:
        return base64.b64decode(stripped, validate=True)
    except (binascii.Error, ValueError):
        return Poison(PoisonReason.UNPARSABLE, "neither JSON nor Base64")


def _event(event: dict[str, Any], account: str) -> Read:
    cloud = "specversion" in event
    if cloud and event.get("specversion") != "1.0":
        return Poison(PoisonReason.WRONG_SCHEMA, "specversion is not 1.0")
    names = ("type", "source", "time") if cloud else ("eventType", "topic", "eventTime")
    kind, where, when = (event.get(name) for name in names)
    if not all(isinstance(v, str) and v for v in (kind, where, when, event.get("id"))):
        missing = [n for n in (*names, "id") if not isinstance(event.get(n), str) or not event[n]]
        return Poison(PoisonReason.WRONG_SCHEMA, f"no {', '.join(missing)}")
    assert isinstance(kind, str) and isinstance(where, str) and isinstance(when, str)
    if not kind.startswith(EVENT_TYPE_PREFIX):
        return Poison(PoisonReason.WRONG_SCHEMA, f"{names[0]} is not a Blob Storage event")
    named = _ACCOUNT.match(where)
    if named is None:
        return Poison(PoisonReason.WRONG_SCHEMA, f"{names[1]} names no storage account")
    if named["account"].lower() != account:
        return Poison(PoisonReason.OTHER_ACCOUNT, f"{names[1]} names another account")
    feed_type = FEED_EVENT_TYPES.get(kind.removeprefix(EVENT_TYPE_PREFIX))
    if feed_type is None:
        return Ignored(kind)
    return _hint(event, feed_type, when, names[2])


def _hint(event: dict[str, Any], feed_type: str, when: str, time_name: str) -> Hint | Poison:
    subject = event.get("subject")
    place = _place(subject)
    if isinstance(place, Poison):
        return place
    data = event.get("data")
    if not isinstance(data, dict):
        return Poison(PoisonReason.WRONG_SCHEMA, "no data object")
    sequencer = data.get("sequencer")
    if not isinstance(sequencer, str) or not _SEQUENCER.match(sequencer):
        return Poison(PoisonReason.WRONG_SCHEMA, "data.sequencer is not 16 to 64 hex digits")
    try:
        at = datetime.fromisoformat(when)
    except ValueError:
        return Poison(PoisonReason.WRONG_SCHEMA, f"{time_name} is not ISO 8601")
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    fields = {feed: data.get(grid) for grid, feed in _DATA_FIELDS if data.get(grid) is not None}
    etag = fields.get("etag")
    if isinstance(etag, str):
        fields["etag"] = etag.strip('"')
    if "contentLength" in fields and not isinstance(fields["contentLength"], int):
        return Poison(PoisonReason.WRONG_SCHEMA, "data.contentLength is not a number")
    record = {
        "topic": event.get("topic") or event.get("source"),
        "subject": subject,
        "eventType": feed_type,
        "eventTime": at.isoformat().replace("+00:00", "Z"),
        "id": event["id"],
        "data": fields,
    }
    container, blob = place
    return Hint(record, container, blob, sequencer, at)


def _place(subject: object) -> tuple[str, str] | Poison:
    """The container and blob a subject names, as long as it stays inside its container."""
    where = split_subject(subject)
    if where is None or where[1] is None:
        return Poison(PoisonReason.WRONG_SCHEMA, "subject names no blob")
    container, blob = where[0], where[1]
    if not _CONTAINER.match(container):
        return Poison(PoisonReason.ESCAPES_CONTAINER, "subject's container is not a container name")
    segments = blob.split("/")
    if not blob or _UNSAFE.search(blob) or any(s in (".", "..") for s in segments):
        return Poison(PoisonReason.ESCAPES_CONTAINER, "subject's blob name leaves its container")
    return container, blob
