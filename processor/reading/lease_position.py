"""The continuation stored in a lease: where the lease's shard stands across segments.

A lease follows one shard name (`00`, `01`, ...) through every segment of the feed. Its position
is the segment being read (or, with `is_segment_done`, the last one finished) and the shard
position inside it. `start_time` and `end_time` are the processor's start and end options, fixed
when the lease row was created, so every host that ever holds the lease delivers the same window.

A scan lease (`scan-NN`, made by `cfp run --initial-scan`) holds a `ScanPosition` instead: its
partition of the account's blobs, when the scan started, and the last blob it delivered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from processor.changefeed.errors import InvalidContinuation
from processor.changefeed.position import ShardPosition
from processor.changefeed.selection import TimeRange, parse_event_time

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
    end_time: datetime | None = None  # `--end-time`: no segment wholly after it is read
    finished: bool = False  # read up to its end time: no host takes the lease again

    @property
    def is_finished(self) -> bool:
        """Nothing more will ever be delivered: a scan partition done, or a lease read up to
        its end time."""
        return self.scan.done if self.scan is not None else self.finished

    def moved_to(
        self, segment: str | None, is_segment_done: bool, shard: ShardPosition | None = None
    ) -> LeasePosition:
        """Another place in the feed, with the same start and end times."""
        return LeasePosition(
            segment, is_segment_done, shard or ShardPosition(), self.start_time, None, self.end_time
        )

    @property
    def window(self) -> TimeRange:
        """The event times this lease delivers."""
        return TimeRange(self.start_time, self.end_time)

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
        if self.end_time is not None:
            doc["endTime"] = self.end_time.isoformat()
        if self.finished:
            doc["finished"] = True
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
        start_time, end_time = _time(doc, "startTime", lease), _time(doc, "endTime", lease)
        shard = ShardPosition.from_json(doc["shard"]) if "shard" in doc else ShardPosition()
        scan = ScanPosition.from_json(doc["scan"], lease=lease) if "scan" in doc else None
        done, finished = bool(doc.get("done", False)), bool(doc.get("finished", False))
        return cls(segment, done, shard, start_time, scan, end_time, finished)

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


def _time(doc: dict[str, object], key: str, lease: str) -> datetime | None:
    raw = doc.get(key)
    try:
        return parse_event_time(raw) if isinstance(raw, str) else None
    except ValueError:
        raise InvalidContinuation(f"lease {lease}: {key} {raw!r} is not a time") from None


def is_finished_lease(continuation: str | None, *, caught_up: bool) -> bool:
    """Whether a lease row is finished (a done scan partition, or read to its end time) and
    recorded so: nobody takes it, and it counts for no host."""
    if not caught_up:
        return False
    try:
        return LeasePosition.from_json(continuation).is_finished
    except InvalidContinuation:
        return False
