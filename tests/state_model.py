"""A plain model of the current-state table ('the newest event per blob wins, deletes leave
tombstones, tier and tags come from their newest setters'), and made-up events to check the
real table against it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from observers.changes import records_table
from observers.origin import Origin

SEGMENT = "idx/segments/2026/01/01/0100/meta.json"
BLOBS = [("c1", "a.txt"), ("c1", "dir/b c"), ("c2", "a.txt")]
KINDS = ["created", "deleted", "props", "tier", "tags", "snapshot", "control"]


@dataclass(frozen=True)
class Event:
    blob: int
    seq: int
    kind: str  # created, deleted, props, tier, tags, snapshot, control
    value: int

    def record(self, container_prefix: str = "") -> dict[str, Any]:
        container, name = BLOBS[self.blob]
        event_type = {
            "created": "BlobCreated",
            "deleted": "BlobDeleted",
            "props": "BlobPropertiesUpdated",
            "tier": "BlobTierChanged",
            "tags": "BlobPropertiesUpdated",
            "snapshot": "BlobSnapshotCreated",
            "control": "Control",
        }[self.kind]
        subject = f"/blobServices/default/containers/{container_prefix}{container}/blobs/{name}"
        if self.kind == "control":
            subject = "/blobServices/default/containers/$blobchangefeed/blobs/meta/segments.json"
        data: dict[str, Any] = {
            "sequencer": f"{self.seq:048x}",
            "etag": f"0x{self.seq:x}",
            "contentLength": self.value,
            "contentType": f"type/{self.value}",
            "blobType": "BlockBlob",
            "blobTier": f"T{self.value}" if self.kind == "tier" else None,
            "snapshot": "2026-01-01T00:00:00Z" if self.kind == "snapshot" else None,
            "blobTagsUpdated": (
                {"previous": {}, "current": {"v": str(self.value)}} if self.kind == "tags" else None
            ),
        }
        return {
            "subject": subject,
            "eventType": event_type,
            "eventTime": event_time(self.seq),
            "id": f"id-{container_prefix}{self.blob}-{self.seq}",
            "data": data,
        }


Row = dict[str, Any]


def event_time(seq: int) -> str:
    """Events happen one second apart, in sequencer order."""
    return f"2026-01-01T01:{seq // 60 % 60:02d}:{seq % 60:02d}.0000000Z"


def blob_events(events: list[Event], blob: int) -> list[Event]:
    """One blob's events that change it, each once, in sequencer order."""
    mine = {e for e in events if e.blob == blob and e.kind not in ("snapshot", "control")}
    return sorted(mine, key=lambda e: e.seq)


def after(mine: list[Event]) -> Row:
    """The blob after `mine` (in order): the newest event's properties, its tier and tags from
    their newest setters."""
    last = mine[-1]
    resets = ("created", "deleted")
    tier = [e for e in mine if e.kind in (*resets, "tier")][-1:]
    tags = [e for e in mine if e.kind in (*resets, "tags")][-1:]
    return {
        "deleted": last.kind == "deleted",
        "content_length": last.value,
        "sequencer": f"{last.seq:048x}",
        "tier": f"T{tier[0].value}" if tier and tier[0].kind == "tier" else None,
        "tags": {"v": str(tags[0].value)} if tags and tags[0].kind == "tags" else None,
    }


def model(events: list[Event], container_prefix: str = "") -> dict[tuple[str, str], Row]:
    """The state table: each blob as its events leave it."""
    out: dict[tuple[str, str], Row] = {}
    for blob in range(len(BLOBS)):
        mine = blob_events(events, blob)
        if mine:
            container, name = BLOBS[blob]
            out[(container_prefix + container, name)] = after(mine)
    return out


def history_model(
    events: list[Event], container_prefix: str = ""
) -> dict[tuple[str, str, str], Row]:
    """The history table: each blob after each of its events, until its next event."""
    out: dict[tuple[str, str, str], Row] = {}
    for blob in range(len(BLOBS)):
        mine = blob_events(events, blob)
        container, name = BLOBS[blob]
        for i, e in enumerate(mine):
            row = after(mine[: i + 1])
            start = row.pop("sequencer")
            nxt = mine[i + 1] if i + 1 < len(mine) else None
            row["valid_from"] = event_time(e.seq)
            row["valid_to"] = event_time(nxt.seq) if nxt else None
            row["valid_to_sequencer"] = f"{nxt.seq:048x}" if nxt else None
            out[(container_prefix + container, name, start)] = row
    return out


def changes(events: list[Event], *, container_prefix: str = "", shard: str = "00") -> pa.Table:
    """The events as change log rows (positions in the order given)."""
    records = [e.record(container_prefix) for e in events]
    positions = [f"p{i:06d}" for i in range(len(records))]
    return records_table(records, positions, Origin(shard, SEGMENT))


def seen(rows: list[Row]) -> dict[tuple[str, str], Row]:
    """State rows in the model's shape."""
    keys = ("deleted", "content_length", "sequencer", "tier", "tags")
    out = {}
    for r in rows:
        row = {k: r[k] for k in keys}
        if isinstance(row["tags"], list):  # a map as pyarrow hands it: key-value pairs
            row["tags"] = dict(row["tags"])
        out[(r["container"], r["blob"])] = row
    return out


def seen_history(rows: list[Row]) -> dict[tuple[str, str, str], Row]:
    """History rows in the model's shape."""
    keys = ("deleted", "content_length", "tier", "tags", "valid_to_sequencer")
    out = {}
    for r in rows:
        row = {k: r[k] for k in keys}
        if isinstance(row["tags"], list):
            row["tags"] = dict(row["tags"])
        row["valid_from"] = _time(r["valid_from"])
        row["valid_to"] = _time(r["valid_to"])
        out[(r["container"], r["blob"], r["valid_from_sequencer"])] = row
    return out


def _time(value: Any) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%S.0000000Z")


def event_lists(*, min_size: int) -> st.SearchStrategy[list[Event]]:
    """Each blob's events have distinct sequencers; the same event may come several times
    (replays)."""
    return st.lists(
        st.builds(
            Event,
            blob=st.integers(0, len(BLOBS) - 1),
            seq=st.integers(1, 40),
            kind=st.sampled_from(KINDS),
            value=st.integers(0, 9),
        ),
        min_size=min_size,
        max_size=40,
        unique_by=lambda e: (e.blob, e.seq),
    )


feeds = event_lists(min_size=0)
busy_feeds = event_lists(min_size=12)
