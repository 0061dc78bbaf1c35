"""The continuation stored in a lease: where the lease's shard stands across segments.

A lease follows one shard name (`00`, `01`, ...) through every segment of the feed. Its position
is the segment being read (or, with `is_segment_done`, the last one finished) and the shard
position inside it. `start_time` is the processor's start option, fixed when the lease row was
created, so every host that ever holds the lease skips the same history.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from processor.changefeed.errors import InvalidContinuation
from processor.changefeed.position import ShardPosition
from processor.changefeed.selection import parse_event_time

VERSION = 1


@dataclass(frozen=True, slots=True)
class LeasePosition:
    segment: str | None = None
    is_segment_done: bool = False
    shard: ShardPosition = field(default_factory=ShardPosition)
    start_time: datetime | None = None

    def to_json(self) -> str:
        doc: dict[str, object] = {"v": VERSION, "segment": self.segment}
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
        return cls(segment, bool(doc.get("done", False)), shard, start_time)

    def order_key(self) -> tuple[str, int, str, int, int]:
        """Positions compare by this key; a checkpoint must never lower it."""
        return (
            self.segment or "",
            1 if self.is_segment_done else 0,
            self.shard.chunk or "",
            self.shard.block_offset,
            self.shard.event_index,
        )

    def is_before(self, other: LeasePosition) -> bool:
        return self.order_key() < other.order_key()
