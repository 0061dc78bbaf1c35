"""A stream's offset: where a micro-batch ends, as Spark stores it in the query's checkpoint.

Spark writes an offset with a plain `json.dumps` and compares offsets as text, so `to_dict`
always puts the keys in the same order (shards sorted): an unchanged position must serialise to
the same text, or Spark would see new data where there is none. The position is the feed
position the rest of cfp uses (segment, and per shard chunk, block offset, event index); a
finished segment keeps its shards' end positions, so the ranges between two offsets follow
from the offsets alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from processor.changefeed.errors import InvalidContinuation
from processor.changefeed.position import FeedPosition, ShardPosition

OFFSET_VERSION = 1


@dataclass(frozen=True, slots=True)
class StreamOffset:
    """`position`: where the stream stands. `skipped`: chunks and segments found gone
    (retention) and stepped over since the stream began (`failOnDataLoss=false`).
    `read_at`: when the micro-batch ending here was planned, the `read_timestamp` of its rows
    (kept in the offset so that a replayed batch gives the same rows)."""

    account: str
    position: FeedPosition = field(default_factory=FeedPosition)
    skipped: int = 0
    read_at: datetime | None = None

    def to_dict(self) -> dict[str, object]:
        p = self.position
        return {
            "version": OFFSET_VERSION,
            "account": self.account,
            "segment": p.segment,
            "segmentDone": p.is_segment_done,
            "shards": {k: p.shards[k].to_json() for k in sorted(p.shards)},
            "skipped": self.skipped,
            "readAt": None if self.read_at is None else _iso(self.read_at),
        }

    @classmethod
    def from_dict(cls, doc: object, *, account: str) -> StreamOffset:
        """Errors: `InvalidContinuation` naming what is wrong (another account, another
        version, a field of the wrong type)."""
        if not isinstance(doc, dict) or doc.get("version") != OFFSET_VERSION:
            raise InvalidContinuation(f"not a blobchangefeed offset of version 1: {doc!r}")
        if doc.get("account") != account:
            raise InvalidContinuation(
                f"offset belongs to account {doc.get('account')!r}, not {account!r}: a "
                "checkpoint of another account's stream"
            )
        segment, shards = doc.get("segment"), doc.get("shards")
        skipped, read_at = doc.get("skipped", 0), doc.get("readAt")
        if segment is not None and not isinstance(segment, str):
            raise InvalidContinuation(f"offset segment {segment!r} is not a string")
        if not isinstance(shards, dict):
            raise InvalidContinuation(f"offset shards {shards!r} is not an object")
        if not isinstance(skipped, int) or skipped < 0:
            raise InvalidContinuation(f"offset skipped {skipped!r} is not a count")
        if read_at is not None and not isinstance(read_at, str):
            raise InvalidContinuation(f"offset readAt {read_at!r} is not a time")
        position = FeedPosition(
            segment,
            bool(doc.get("segmentDone", False)),
            {str(k): ShardPosition.from_json(v) for k, v in shards.items()},
        )
        when = None if read_at is None else datetime.fromisoformat(read_at)
        return cls(account, position, skipped, when)


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="milliseconds")
