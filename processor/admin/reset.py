"""`cfp processor reset`: every lease of a paused processor sent back (or forward) in time.

A reset replaces each feed lease's continuation with the start of the feed, a start time, or
now, keeping the processor's end time; it bumps each lease's epoch, so that a host that still
believes it holds a lease (a zombie: stopped, then woken) finds its checkpoints refused; and it
records the jump in the lease's `Moves`. Scan partitions of an initial scan are left as they
are: they deliver the account's blobs, not the feed.

A lease with an owner is reset only once that owner has shown itself gone: its row did not
change for a whole lease expiry (a live owner renews well within it). The decisions are pure
functions here; the CLI does the waiting and the writes.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from leases import Lease, LeaseMove
from processor.reading.lease_position import LeasePosition, is_scan_token


class ResetTo(enum.Enum):
    BEGINNING = "the beginning of the feed"
    START_TIME = "a start time"
    NOW = "now"


@dataclass(frozen=True, slots=True)
class ResetPlan:
    """Where every feed lease goes, and the move each one records."""

    position: LeasePosition
    leases: list[Lease]  # the feed leases to reset (scan partitions left out)
    reason: str

    def describe(self) -> str:
        start = self.position.start_time
        return "the beginning of the feed" if start is None else f"events from {start.isoformat()}"

    def move_of(self, lease: Lease, at: datetime) -> LeaseMove:
        return LeaseMove(
            at=at,
            before=lease.continuation,
            after=self.position.to_json(),
            skipped_bytes=None,  # a rewind skips nothing; a forward reset is what was asked for
            reason=f"reset to {self.describe()}" + (f": {self.reason}" if self.reason else ""),
            error=lease.error,
        )


def plan_reset(
    leases: Iterable[Lease],
    to: ResetTo,
    *,
    start_time: datetime | None,
    now: datetime,
    end_time: datetime | None,
    reason: str = "",
) -> ResetPlan:
    """The reset of these leases to `to` (`start_time` for `ResetTo.START_TIME`)."""
    if to is ResetTo.START_TIME:
        if start_time is None:
            raise ValueError("a reset to a start time needs the time")
        start: datetime | None = start_time
    else:
        start = now if to is ResetTo.NOW else None
    if end_time is not None and start is not None and start >= end_time:
        raise ValueError(
            f"the processor ends at {end_time.isoformat()}: a reset to {start.isoformat()} "
            "would deliver nothing"
        )
    feed = [x for x in leases if not is_scan_token(x.token)]
    return ResetPlan(LeasePosition(start_time=start, end_time=end_time), feed, reason)


def still_held(first: Iterable[Lease], last: Iterable[Lease]) -> list[Lease]:
    """Leases owned in `last` (listed a lease expiry after `first`) whose row changed since
    `first`: a live host renewed or took them. An owned row unchanged for that long has a dead
    owner."""
    before = {x.token: x.etag for x in first}
    return [x for x in last if x.owner is not None and before.get(x.token) != x.etag]
