"""A lease's fence in the change log: Delta transaction ids that only the lease's owner can pass.

Every write of a lease's events carries the Delta writer options `txnAppId` = the lease's app id
and `txnVersion` = `epoch * 2**40 + sequence`. Delta skips a write whose version is at or below
the one the table records for its app id, and refuses (`ConcurrentTransactionException`) a write
during which another commit set that app id. A new owner (a higher epoch) first commits an empty
write at `epoch * 2**40` (the fence): every write of an older epoch then either landed before
the fence, or is refused, or is skipped. After the fence the owner reads the lease's highest
position in the change log (its floor) and leaves out of its writes what is at or below it.
So each event is in the change log once, with nothing but blind appends (`change_log.py` does the
I/O; this module is the arithmetic and the bookkeeping, pure).

A lease that failed a write, or opens again at the same epoch, syncs again: a fence at its next
version, then a new floor. A write of its own still in flight meets the same three fates. A
floor is read from a position on (Delta's statistics skip the files below it): it speaks only for
rows from there, and a write with rows below it reads the floor again from them first.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

SEQUENCE_BITS = 40
EPOCH_BITS = 23  # epoch * 2**40 + sequence stays below 2**63, a Delta long
MAX_SEQUENCE = (1 << SEQUENCE_BITS) - 1
MAX_EPOCH = (1 << EPOCH_BITS) - 1


class FenceRangeError(ValueError):
    """An epoch or a sequence number outside what a transaction version can hold."""


def txn_version(epoch: int, sequence: int) -> int:
    """The `txnVersion` of write `sequence` of a lease at `epoch` (0: the epoch's fence).
    Ordered like (epoch, sequence): a higher epoch's versions are above all of a lower one's."""
    if not 0 <= epoch <= MAX_EPOCH:
        raise FenceRangeError(f"epoch {epoch} is outside 0..{MAX_EPOCH}")
    if not 0 <= sequence <= MAX_SEQUENCE:
        raise FenceRangeError(f"sequence {sequence} is outside 0..{MAX_SEQUENCE}")
    return (epoch << SEQUENCE_BITS) | sequence


def app_id(processor: str, lease: str) -> str:
    """The lease's `txnAppId`: one per lease of a processor (hence one fence per lease)."""
    return f"{processor}/{lease}" if processor else lease


@dataclass(slots=True)
class LeaseFence:
    """Where one lease's writes stand on this host: its epoch, the last version it used, and
    the floor read after its last fence (None: not synced since it opened or last failed)."""

    lease: str
    app_id: str
    epoch: int
    sequence: int = -1  # the last sequence number used at this epoch (-1: none yet)
    floor: str | None = None  # highest position in the change log after the fence...
    floor_from: str | None = None  # ...from this one on (None: of all the lease's positions)
    fenced: bool = False  # the fence of this sync committed (its floor may not be read yet)
    synced: bool = False  # ... and the floor read after it
    checked: bool = False  # a write since the last sync was seen in the table
    generation: int = 0  # bumped at every unsync: a fence begun before does not count
    asked: int = -1  # the generation in which a sync ahead of the first write was last asked

    def next_version(self) -> int:
        """The version of the next write (or fence), consumed."""
        self.sequence += 1
        return txn_version(self.epoch, self.sequence)

    def unsync(self) -> None:
        """A write failed or its outcome is unknown: sync again before the next one."""
        self.fenced = self.synced = self.checked = False
        self.generation += 1

    def ask_sync(self) -> bool:
        """Whether a sync ahead of the lease's next write is due (not synced, none asked since
        it last unsynced); if so, it counts as asked."""
        if self.synced or self.asked == self.generation:
            return False
        self.asked = self.generation
        return True

    def fenced_in(self, generation: int) -> None:
        """The fence begun in `generation` committed: it counts unless the lease unsynced since."""
        if generation == self.generation:
            self.fenced = True

    def synced_at(
        self, floor: str | None, generation: int | None = None, *, since: str | None = None
    ) -> None:
        """The fence committed and the floor was read after it, of the positions from `since`
        on (a sync begun in `generation` does not count if the lease unsynced since)."""
        if generation is not None and generation != self.generation:
            return
        self.floor, self.floor_from = floor, since
        self.fenced = self.synced = True
        self.checked = False

    def reopened(self, epoch: int) -> None:
        """The lease opened again here: a new epoch starts its sequence over; the same epoch
        goes on from where it was (a version may never be used twice). Sync again either way."""
        if epoch != self.epoch:
            self.epoch, self.sequence = epoch, -1
        self.unsync()

    def floor_covers(self, first: str) -> bool:
        """Whether the floor speaks for positions from `first` on: it was read from `first` or
        before. Rows below where it was read from may be in the change log above nothing the
        floor knows (queued before the sync, written by an owner before us)."""
        return self.floor_from is None or first >= self.floor_from

    def raise_floor(self, position: str | None) -> None:
        if position is not None and (self.floor is None or position > self.floor):
            self.floor = position


def above(table: pa.Table, floor: str | None) -> pa.Table:
    """The rows of `table` whose position is above `floor` (all of them when None)."""
    if floor is None or table.num_rows == 0:
        return table
    return table.filter(pc.greater(table["position"], pa.scalar(floor)))
