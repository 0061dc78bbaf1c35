"""The lease record: one per shard, the unit of ownership and of checkpointing.

A `Lease` is an immutable snapshot of one row as last read or written. Change it with
`dataclasses.replace`; stores never mutate what they are given. The continuation is opaque here:
`leases/` knows nothing of the change feed, only that the processor stores a string in it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import NewType

LeaseToken = NewType("LeaseToken", str)
"""The row key: the shard's name, for example `00`."""

HostId = NewType("HostId", str)
"""A host process: unique per process (the default is host name, pid and a random suffix)."""


# A lease keeps the newest moves only; older ones are in the logs of `cfp lease move`.
MAX_MOVES = 20


@dataclass(frozen=True, slots=True)
class LeaseMove:
    """A jump of a lease's position: an operator's move of a stopped lease (past a bad block, a
    gap, or to a position), or a retention gap its owner stepped over (data that no longer exists).

    `skipped_bytes` is how much feed data the jump passed over, as estimated from blob sizes
    when it was made (None when it could not be estimated, as for data already deleted).
    Continuations are opaque here.
    """

    at: datetime
    before: str | None
    after: str
    skipped_bytes: int | None
    reason: str
    error: str  # why the lease had stopped, as it stood when moved

    def to_json(self) -> dict[str, object]:
        return {
            "at": self.at.isoformat(),
            "from": self.before,
            "to": self.after,
            "skippedBytes": self.skipped_bytes,
            "reason": self.reason,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> LeaseMove:
        skipped = doc.get("skippedBytes")
        before = doc.get("from")
        return cls(
            at=datetime.fromisoformat(str(doc["at"])),
            before=before if isinstance(before, str) else None,
            after=str(doc["to"]),
            skipped_bytes=skipped if isinstance(skipped, int) else None,
            reason=str(doc.get("reason") or ""),
            error=str(doc.get("error") or ""),
        )


def moves_to_text(moves: tuple[LeaseMove, ...]) -> str:
    return json.dumps([m.to_json() for m in moves[-MAX_MOVES:]], separators=(",", ":"))


def moves_from_text(text: str) -> tuple[LeaseMove, ...]:
    """Raises ValueError (or KeyError) for text that is not a list of moves."""
    if not text:
        return ()
    docs = json.loads(text)
    if not isinstance(docs, list):
        raise ValueError("moves are not a list")
    return tuple(LeaseMove.from_json(d) for d in docs)


@dataclass(frozen=True, slots=True)
class Delivered:
    """What a worker delivered since its previous checkpoint, added to the lease's counters."""

    events: int = 0
    event_bytes: int = 0
    last_event_time: datetime | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """One lease row.

    Fields, with what each is for:
        token: which shard (RowKey).
        owner: the host holding it; None = free.
        epoch: bumped on every acquire or steal (every change to a new owner). The fencing token:
            a write by an older epoch is refused.
        version: bumped on every write of any kind. Other hosts judge liveness by seeing it change
            (an ETag alone is not enough: Azurite may repeat one within a clock tick).
        continuation: the processor's position, opaque to this package; kept on release.
        next_owner: a host that asked for a cooperative hand-over (None = nobody asked).
        checkpoint_time: wall-clock time of the last checkpoint, for status display only; never
            used to decide anything.
        caught_up: the owner found nothing more to read when it wrote this continuation.
        error: why the owner stopped working on it (empty when it did not), for status display.
        parked: the lease stopped on something retrying cannot fix (bad data, a poison batch with
            `--on-observer-error stop`): no host takes it until an operator moves or resumes it.
        moves: what operators did to it by hand, oldest first (the newest `MAX_MOVES`).
        gaps: retention gaps its owners stepped over (position gone, continued from the earliest
            data still present), oldest first (the newest `MAX_MOVES`).
        dead_letters: batches its owners gave up on and wrote to the dead-letter folder.
        last_event_time: event time of the last event delivered before the last checkpoint (for
            the time lag shown by `cfp status`).
        events, event_bytes: events delivered and feed bytes moved past, summed over all owners
            (replays included): their ratio estimates the events left from the bytes left.
        load: the owner's recent read rate in feed bytes/s, written with its renewals (a new
            owner starts from it): what `--balance-by load` weighs the lease by.
        etag: the store's concurrency token of this snapshot (None before it was stored).
    """

    token: LeaseToken
    owner: HostId | None = None
    epoch: int = 0
    version: int = 0
    continuation: str | None = None
    next_owner: HostId | None = None
    checkpoint_time: datetime | None = None
    caught_up: bool = False
    error: str = ""
    parked: bool = False
    moves: tuple[LeaseMove, ...] = ()
    gaps: tuple[LeaseMove, ...] = ()
    dead_letters: int = 0
    last_event_time: datetime | None = None
    events: int = 0
    event_bytes: int = 0
    load: float = 0.0
    etag: str | None = None

    def average_event_bytes(self) -> float | None:
        """None when nothing was read from the feed yet (a scan partition reads no feed bytes)."""
        return self.event_bytes / self.events if self.events and self.event_bytes else None

    def is_held_by(self, host: HostId, epoch: int) -> bool:
        """Whether this snapshot still shows `host` as owner at `epoch` (nothing newer happened)."""
        return self.owner == host and self.epoch == epoch

    def same_write(self, other: Lease) -> bool:
        """Whether two snapshots show the same write (to judge a write whose reply was lost)."""
        return (
            self.version == other.version
            and self.owner == other.owner
            and self.epoch == other.epoch
            and self.continuation == other.continuation
            and self.next_owner == other.next_owner
        )
