"""Where one lease stands between its reader, its observer and its checkpoints: pure bookkeeping.

The reader hands out positions in order; the observer accepts batches (or they are dead-lettered);
a checkpoint writes one position into the lease. The rules kept here: a checkpoint never moves
back; a position reached without a batch (the end of a chunk or segment) is checkpointed only
once every batch before it is confirmed, so an observer that buffers never has a batch skipped
under it; each dead letter is counted in the lease exactly once, by the first checkpoint past
it; the lease's event counters gain what was delivered since the previous checkpoint, once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from leases import Delivered
from processor.reading.lease_position import LeasePosition


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One checkpoint to write: its position and what it adds to the lease's counters."""

    position: LeasePosition
    dead_letters: int  # dead-lettered batches it is the first checkpoint past
    delivered: Delivered  # delivered since the previous checkpoint


@dataclass(slots=True)
class CheckpointLedger:
    checkpointed: LeasePosition  # in the lease
    delivered: LeasePosition  # after the last batch or step the reader handed out
    batch_end: LeasePosition  # after the last batch the observer accepted
    dead_ends: list[LeasePosition] = field(default_factory=list)  # not yet counted in the lease
    pending: Delivered = field(default_factory=Delivered)  # since the last checkpoint

    @classmethod
    def at(cls, position: LeasePosition) -> CheckpointLedger:
        """A ledger for a lease taken at `position` (its continuation)."""
        return cls(checkpointed=position, delivered=position, batch_end=position)

    def accepted(
        self, end: LeasePosition, *, events: int, event_bytes: int, last: datetime | None
    ) -> None:
        """The observer accepted a batch ending at `end`."""
        self.delivered = self.batch_end = end
        p = self.pending
        self.pending = Delivered(
            p.events + events, p.event_bytes + event_bytes, last or p.last_event_time
        )

    def dead_lettered(self, end: LeasePosition) -> None:
        """A batch ending at `end` went to the dead-letter folder instead of the observer."""
        self.delivered = end
        self.dead_ends.append(end)

    def advanced(self, position: LeasePosition) -> None:
        """The reader moved to `position` without a batch (a chunk or segment ended, or a gap
        was stepped over)."""
        self.delivered = position

    def all_confirmed(self) -> bool:
        """Every batch the observer accepted is checkpointed (one that buffers may lag)."""
        return not self.checkpointed.is_before(self.batch_end)

    def confirmable(self) -> LeasePosition | None:
        """The position to checkpoint now without a batch, if any: where the reader is, once
        every batch before it is confirmed."""
        if self.all_confirmed() and self.checkpointed.is_before(self.delivered):
            return self.delivered
        return None

    def observer_target(self, mark: object | None) -> LeasePosition | None:
        """Where the observer's `checkpoint(mark)` goes: the mark, or after the last batch handed
        out; None when that is not past the checkpoint (never back, nothing new).
        Errors: `TypeError` for a mark that `ctx.mark()` did not make."""
        if mark is None:
            position = self.delivered
        elif isinstance(mark, LeasePosition):
            position = mark
        else:
            raise TypeError(f"checkpoint(mark): not a mark from ctx.mark(): {mark!r}")
        return position if self.checkpointed.is_before(position) else None

    def prepare(self, position: LeasePosition) -> Checkpoint:
        """The checkpoint at `position`. Errors: `AssertionError` when it would move back."""
        if position.is_before(self.checkpointed):
            raise AssertionError(f"checkpoint would move back: {position} < {self.checkpointed}")
        passed = sum(1 for dead in self.dead_ends if not position.is_before(dead))
        return Checkpoint(position, passed, self.pending)

    def written(self, checkpoint: Checkpoint) -> None:
        """`checkpoint` is in the lease: what it counted is no longer pending."""
        sent, now = checkpoint.delivered, self.pending
        self.pending = Delivered(
            now.events - sent.events,
            now.event_bytes - sent.event_bytes,
            None if now is sent else now.last_event_time,
        )
        self.checkpointed = checkpoint.position
        self.dead_ends = [d for d in self.dead_ends if checkpoint.position.is_before(d)]
