"""Continuation tokens of the official change feed SDKs (`CursorVersion` 1), read and written.

The Python, .NET and Java SDKs share one JSON shape:
`{"CursorVersion": 1, "UrlHost", "EndTime", "CurrentSegmentCursor": {"ShardCursors": [
{"CurrentChunkPath", "BlockOffset", "EventIndex"}], "CurrentShardPath", "SegmentPath"}}`.
They differ in small ways, all accepted here:

- `EndTime`: Python writes `"%Y-%m-%dT%H:%M:%S+00:00"` or `""`, .NET an ISO time with offset
  (up to 7 fractional digits) or `null`, Java a time ending in `Z`.
- `BlockOffset`: .NET points after a block's sync marker, Python may point at the marker; the
  chunk reader accepts both. At the end of a chunk it is the chunk's size.
- `ShardCursors` may name only some shards (the others are read from their start); Python can
  write `null` for a shard it has not begun.
- `CurrentShardPath` only decides which shard an SDK reads first; it does not change what is
  read, so it is ignored here and written as the first shard with a cursor.

A token we write carries every begun shard and `"EndTime": null` when there is no end (both the
Python and the .NET SDK read `null` as "no end"). Pure functions; the shard ends a finished
segment needs are looked up by the caller.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from processor.changefeed.errors import FeedError, InvalidContinuation
from processor.changefeed.position import FeedPosition, ShardPosition
from processor.changefeed.selection import parse_event_time
from processor.changefeed.storage.layout import (
    CONTAINER,
    checked_shard_prefix,
    chunk_shard_prefix,
    is_segment_path,
    segment_time,
    shard_prefix,
)

CURSOR_VERSION = 1


@dataclass(frozen=True, slots=True)
class SdkCursor:
    """What an SDK token says: where to resume, and the end time the SDK was reading up to."""

    position: FeedPosition
    end_time: datetime | None = None


def is_sdk_token(text: str) -> bool:
    """Whether `text` is an SDK token rather than one of ours (it names `CursorVersion`)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return isinstance(doc, dict) and "CursorVersion" in doc


def url_host(blob_endpoint: str) -> str:
    """The `UrlHost` the Python SDK writes for an account: `acct.blob.core.windows.net`, or with
    a path-style endpoint (Azurite) host, port and account: `127.0.0.1:10000/devstoreaccount1`."""
    url = urlsplit(blob_endpoint)
    path = url.path.strip("/")
    return f"{url.netloc}/{path}" if path else url.netloc


def _same_account(token_host: str, host: str) -> bool:
    """Whether a token's `UrlHost` names the account whose Python-form host is `host`: .NET and
    Java write only the host name (no port, no path), which is all a real account needs."""
    bare = urlsplit(f"//{host}")
    forms = {host, bare.netloc, bare.hostname or ""}
    return token_host.lower() in {f.lower() for f in forms if f}


def from_sdk_token(text: str, *, host: str) -> SdkCursor:
    """Parse an SDK token for the account whose `UrlHost` is `host`.

    Raises:
        InvalidContinuation: naming the field that is wrong (another account, another cursor
            version, a chunk path outside `$blobchangefeed/log/` or outside the segment, ...).
    """
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise InvalidContinuation(f"SDK continuation is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise InvalidContinuation("SDK continuation is not a JSON object")
    if doc.get("CursorVersion") != CURSOR_VERSION:
        raise InvalidContinuation(
            f"SDK continuation has CursorVersion {doc.get('CursorVersion')!r}; only 1 is known"
        )
    token_host = doc.get("UrlHost")
    if not isinstance(token_host, str):
        raise InvalidContinuation("SDK continuation has no UrlHost (an early preview's UrlHash?)")
    if not _same_account(token_host, host):
        raise InvalidContinuation(
            f"SDK continuation belongs to {token_host!r}, not this account's {host!r}"
        )
    segment_cursor = doc.get("CurrentSegmentCursor")
    if not isinstance(segment_cursor, dict):
        raise InvalidContinuation("SDK continuation has no CurrentSegmentCursor object")
    segment = segment_cursor.get("SegmentPath")
    if not isinstance(segment, str) or not is_segment_path(segment):
        raise InvalidContinuation(f"SDK continuation SegmentPath {segment!r} is not a segment")
    shards: dict[str, ShardPosition] = {}
    for cursor in _shard_cursors(segment_cursor.get("ShardCursors")):
        prefix, position = _shard_cursor(cursor, segment)
        if prefix in shards:
            raise InvalidContinuation(f"SDK continuation has two cursors for shard {prefix}")
        shards[prefix] = position
    return SdkCursor(FeedPosition(segment, False, shards), _end_time(doc.get("EndTime")))


def _shard_cursors(value: object) -> list[object]:
    if value is None:
        return []
    if isinstance(value, dict):  # the Python SDK's in-memory form, keyed by shard path
        value = list(value.values())
    if not isinstance(value, list):
        raise InvalidContinuation("SDK continuation ShardCursors is not a list")
    return [c for c in value if c is not None]  # Python writes null for a shard not begun


def _shard_cursor(cursor: object, segment: str) -> tuple[str, ShardPosition]:
    if not isinstance(cursor, dict):
        raise InvalidContinuation(f"SDK continuation shard cursor {cursor!r} is not an object")
    chunk = cursor.get("CurrentChunkPath")
    offset, index = cursor.get("BlockOffset"), cursor.get("EventIndex")
    if not isinstance(chunk, str):
        raise InvalidContinuation(f"SDK continuation CurrentChunkPath {chunk!r} is not a string")
    chunk = chunk.removeprefix(f"{CONTAINER}/")
    try:
        prefix = checked_shard_prefix(f"{CONTAINER}/{chunk_shard_prefix(chunk)}", manifest="-")
    except (ValueError, FeedError):
        raise InvalidContinuation(
            f"SDK continuation CurrentChunkPath {chunk!r} is not a chunk under {CONTAINER}/log/"
        ) from None
    begin = segment_time(segment)
    if not prefix.endswith(shard_prefix(begin, 0)[len("log/00/") :]):
        raise InvalidContinuation(
            f"SDK continuation CurrentChunkPath {chunk!r} is not in segment {segment}"
        )
    if not _is_count(offset) or not _is_count(index):
        raise InvalidContinuation(
            f"SDK continuation cursor of {chunk}: BlockOffset {offset!r} and EventIndex "
            f"{index!r} must be whole numbers >= 0"
        )
    assert isinstance(offset, int) and isinstance(index, int)
    return prefix, ShardPosition(chunk, offset, index)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _end_time(value: object) -> datetime | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidContinuation(f"SDK continuation EndTime {value!r} is not a time")
    try:
        return parse_event_time(value)
    except ValueError:
        raise InvalidContinuation(f"SDK continuation EndTime {value!r} is not a time") from None


def to_sdk_token(
    position: FeedPosition,
    *,
    host: str,
    end_time: datetime | None = None,
    shard_ends: Mapping[str, ShardPosition] | None = None,
) -> str:
    """An SDK token for `position`. A finished segment (`is_segment_done`) has no shard
    positions of its own: `shard_ends` gives each of its shards' last chunk and size.

    Raises:
        ValueError: `position` is the start of the feed (an SDK starts there without a token),
            or a finished segment came without `shard_ends`.
    """
    if position.segment is None:
        raise ValueError("nothing has been read yet: start the SDK without a token")
    shards = dict(position.shards)
    if position.is_segment_done:
        if shard_ends is None:
            raise ValueError(f"segment {position.segment} is finished: its shard ends are needed")
        shards = dict(shard_ends)
    cursors = [
        {"CurrentChunkPath": p.chunk, "BlockOffset": p.block_offset, "EventIndex": p.event_index}
        for _, p in sorted(shards.items())
        if p.chunk is not None
    ]
    first = sorted(p for p, s in shards.items() if s.chunk is not None)
    doc = {
        "CursorVersion": CURSOR_VERSION,
        "UrlHost": host,
        "EndTime": None
        if end_time is None
        else end_time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00"),
        "CurrentSegmentCursor": {
            "ShardCursors": cursors,
            "CurrentShardPath": first[0] if first else "",
            "SegmentPath": position.segment,
        },
    }
    return json.dumps(doc, separators=(",", ":"))
