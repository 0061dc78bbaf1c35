"""Where a batch comes from (`Origin`): one value that every event of a batch shares, so that
the lease, the segment, the processor and the read time travel together, never one by one."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from observers.envelope import HINT_SEGMENT_PREFIX, SCAN_SEGMENT_PREFIX


def segment_begin(segment_path: str) -> datetime:
    """`idx/segments/2026/01/01/0100/meta.json` -> 2026-01-01 01:00 UTC; the initial scan's
    `scan/<start time>` -> its start time; hints' `hint/<receive time>` -> that time."""
    for prefix in (SCAN_SEGMENT_PREFIX, HINT_SEGMENT_PREFIX):
        if segment_path.startswith(prefix):
            return datetime.fromisoformat(segment_path.removeprefix(prefix)).astimezone(UTC)
    parts = segment_path.removeprefix("idx/segments/").removesuffix("/meta.json").split("/")
    year, month, day, hhmm = (int(p) for p in parts)
    return datetime(year, month, day, hhmm // 100, hhmm % 100, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Origin:
    """Which lease read a batch, from which segment, for which processor, and when.

    The change log keeps it in four columns, under the names of its format: `shard` (`lease`),
    `segment` (`segment_begin`, a time), `stream_name` (`processor`), `read_timestamp`
    (`read_at`).
    """

    lease: str  # the lease's name: its shard's ("00"), its initial scan partition's, or "hints"
    segment_path: str  # the segment's manifest ("idx/segments/.../meta.json"), "scan/<start>"
    # or, for hints, "hint/<received>"
    processor: str = ""  # the processor's name (`cfp read`: the account's)
    read_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def provisional(self) -> bool:
        """A batch of hints: Blob Storage events the feed has not confirmed (yet)."""
        return self.segment_path.startswith(HINT_SEGMENT_PREFIX)

    @property
    def segment_begin(self) -> datetime:
        """When the segment begins: the change log's `segment`."""
        return segment_begin(self.segment_path)
