"""The continuation stored in a lease: where the lease's shard stands across segments.

A lease follows one shard name (`00`, `01`, ...) through every segment of the feed. Its position
is the segment being read (or, with `is_segment_done`, the last one finished) and the shard
position inside it. `start_time` is the processor's start option, fixed when the lease row was
created, so every host that ever holds the lease skips the same history.

A scan lease (`scan-NN`, made by `cfp run --initial-scan`) holds a `ScanPosition` instead: its
partition of the account's blobs, when the scan started, and the last blob it delivered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from processor.changefeed.errors import InvalidContinuation
from processor.changefeed.position import ShardPosition
from processor.changefeed.selection import parse_event_time

VERSION = 1
SCAN_PREFIX = "scan-"


def scan_token(partition: int) -> str:
    return f"{SCAN_PREFIX}{partition:02d}"


def is_scan_token(token: str) -> bool:
    return token.startswith(SCAN_PREFIX)


@dataclass(frozen=True, slots=True)
class ScanPosition:
    """Where one partition of the initial scan stands: blobs are listed container by container
    in name order, and this partition delivers those whose `scan_partition` is `partition`."""

    partition: int
    partitions: int
    started_at: datetime
    after: tuple[str, str] | None = None  # (container, blob) of the last blob delivered
    done: bool = False

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "p": self.partition,
            "of": self.partitions,
            "at": self.started_at.isoformat(),
        }
        if self.after is not None:
            doc["after"] = list(self.after)
        if self.done:
            doc["done"] = True
        return doc

    @classmethod
    def from_json(cls, doc: object, *, lease: str) -> ScanPosition:
        bad = InvalidContinuation(f"lease {lease}: scan position {doc!r} is not one we wrote")
        if not isinstance(doc, dict):
            raise bad
        p, of, at, after = doc.get("p"), doc.get("of"), doc.get("at"), doc.get("after")
        if not isinstance(p, int) or not isinstance(of, int) or not 0 <= p < of:
            raise bad
        if not isinstance(at, str):
            raise bad
        if after is not None and not (
            isinstance(after, list) and len(after) == 2 and all(isinstance(x, str) for x in after)
        ):
            raise bad
        try:
            started = parse_event_time(at)
        except ValueError:
            raise bad from None
        return cls(
            p, of, started, None if after is None else (after[0], after[1]), bool(doc.get("done"))
        )

    def order_key(self) -> tuple[int, str, str]:
        """Listing order: containers by name, then blobs by name; done after everything."""
        if self.done:
            return (1, "", "")
        return (0, *(self.after or ("", "")))


@dataclass(frozen=True, slots=True)
class LeasePosition:
    segment: str | None = None
    is_segment_done: bool = False
    shard: ShardPosition = field(default_factory=ShardPosition)
    start_time: datetime | None = None
    scan: ScanPosition | None = None

    def to_json(self) -> str:
        doc: dict[str, object] = {"v": VERSION, "segment": self.segment}
        if self.scan is not None:
            doc["scan"] = self.scan.to_json()
        if self.is_segment_done:
            doc["done"] = True
        elif self.shard.chunk is not None:
            doc["shard"] = self.shard.to_json()
        if self.start_time is not None:
            doc["startTime"] = self.start_time.isoformat()
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None, *, lease: str = "?") -> LeasePosition:
        """Parse a lease's continuation; None or empty is the start of the feed.

        Raises:
            InvalidContinuation: naming the lease, when the text is not one we wrote.
        """
        if not text:
            return cls()
        try:
            doc = json.loads(text)
        except ValueError:
            raise InvalidContinuation(f"lease {lease}: continuation is not JSON") from None
        if not isinstance(doc, dict) or doc.get("v") != VERSION:
            raise InvalidContinuation(f"lease {lease}: continuation is not version {VERSION}")
        segment = doc.get("segment")
        if segment is not None and not isinstance(segment, str):
            raise InvalidContinuation(f"lease {lease}: continuation segment is not a string")
        start = doc.get("startTime")
        try:
            start_time = parse_event_time(start) if isinstance(start, str) else None
        except ValueError:
            raise InvalidContinuation(f"lease {lease}: startTime {start!r} is not a time") from None
        shard = ShardPosition.from_json(doc["shard"]) if "shard" in doc else ShardPosition()
        scan = ScanPosition.from_json(doc["scan"], lease=lease) if "scan" in doc else None
        return cls(segment, bool(doc.get("done", False)), shard, start_time, scan)

    def order_key(self) -> tuple[str, int, str, int, int]:
        """Positions compare by this key; a checkpoint must never lower it. (A scan position
        only ever compares with the same lease's: container and blob stand in for the chunk,
        joined by a character below any a name may hold.)"""
        if self.scan is not None:
            done, container, blob = self.scan.order_key()
            return ("", done, f"{container}\x00{blob}", 0, 0)
        return (
            self.segment or "",
            1 if self.is_segment_done else 0,
            self.shard.chunk or "",
            self.shard.block_offset,
            self.shard.event_index,
        )

    def is_before(self, other: LeasePosition) -> bool:
        return self.order_key() < other.order_key()
