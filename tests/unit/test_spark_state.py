"""The state fold: any order, any replays, any split into batches give the rows a plain model
of 'the newest event per blob wins, deletes leave tombstones' gives."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from observers.spark.schema import records_table
from observers.spark.state import STATE_SCHEMA, merge_state, state_rows

SEGMENT = "idx/segments/2026/01/01/0100/meta.json"
BLOBS = [("c1", "a.txt"), ("c1", "dir/b c"), ("c2", "a.txt")]


@dataclass(frozen=True)
class Event:
    blob: int
    seq: int
    kind: str  # created, deleted, props, tier, tags, snapshot, control
    value: int

    def record(self) -> dict[str, Any]:
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
        subject = f"/blobServices/default/containers/{container}/blobs/{name}"
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
            "eventTime": "2026-01-01T01:00:00.0000000Z",
            "id": f"id-{self.blob}-{self.seq}",
            "data": data,
        }


def model(events: list[Event]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per blob: the newest event's properties, its tier and tags from their newest setters."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for blob in range(len(BLOBS)):
        mine = sorted(
            {e for e in events if e.blob == blob and e.kind not in ("snapshot", "control")},
            key=lambda e: e.seq,
        )
        if not mine:
            continue
        last = mine[-1]
        resets = ("created", "deleted")
        tier = [e for e in mine if e.kind in (*resets, "tier")][-1:]
        tags = [e for e in mine if e.kind in (*resets, "tags")][-1:]
        out[BLOBS[blob]] = {
            "deleted": last.kind == "deleted",
            "content_length": last.value,
            "sequencer": f"{last.seq:048x}",
            "tier": f"T{tier[0].value}" if tier and tier[0].kind == "tier" else None,
            "tags": [("v", str(tags[0].value))] if tags and tags[0].kind == "tags" else None,
        }
    return out


def as_state(events: list[Event]) -> pa.Table:
    records = [e.record() for e in events]
    changes = records_table(
        records, [f"p{i:04d}" for i in range(len(records))], shard="00", segment=SEGMENT
    )
    return state_rows(changes)


def seen(table: pa.Table) -> dict[tuple[str, str], dict[str, Any]]:
    keys = ("deleted", "content_length", "sequencer", "tier", "tags")
    return {(r["container"], r["blob"]): {k: r[k] for k in keys} for r in table.to_pylist()}


# each blob's events have distinct sequencers; the same event may come several times (replays)
feeds = st.lists(
    st.builds(
        Event,
        blob=st.integers(0, len(BLOBS) - 1),
        seq=st.integers(1, 40),
        kind=st.sampled_from(
            ["created", "deleted", "props", "tier", "tags", "snapshot", "control"]
        ),
        value=st.integers(0, 9),
    ),
    max_size=40,
    unique_by=lambda e: (e.blob, e.seq),
)


@settings(max_examples=200, deadline=None)
@given(feeds, st.randoms(use_true_random=False), st.integers(1, 6))
def test_any_order_any_batches_any_replays_give_the_model(
    events: list[Event], rng: random.Random, batches: int
) -> None:
    delivered = events + rng.sample(events, k=len(events) // 2)  # some events come twice
    rng.shuffle(delivered)
    cuts = sorted(rng.sample(range(len(delivered) + 1), k=min(batches, len(delivered) + 1)))
    state = pa.Table.from_pylist([], schema=STATE_SCHEMA)
    for lo, hi in zip([0, *cuts], [*cuts, len(delivered)], strict=True):
        state = merge_state([state, as_state(delivered[lo:hi])])  # one flush at a time
    assert seen(state) == model(events)
    assert state.schema == STATE_SCHEMA
    assert merge_state([state, as_state(events)]).equals(state)  # a full replay changes nothing


def test_a_late_older_event_does_not_bring_a_deleted_blob_back() -> None:
    created, deleted = Event(0, 1, "created", 5), Event(0, 2, "deleted", 5)
    state = merge_state([as_state([deleted])])
    state = merge_state([state, as_state([created])])
    assert seen(state)[BLOBS[0]]["deleted"] is True
    recreated = merge_state([state, as_state([Event(0, 3, "created", 7)])])
    assert seen(recreated)[BLOBS[0]] == {
        "deleted": False,
        "content_length": 7,
        "sequencer": f"{3:048x}",
        "tier": None,
        "tags": None,
    }
