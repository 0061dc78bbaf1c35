"""The lease record: one per shard, the unit of ownership and of checkpointing.

A `Lease` is an immutable snapshot of one row as last read or written. Change it with
`dataclasses.replace`; stores never mutate what they are given. The continuation is opaque here:
`leases/` knows nothing of the change feed, only that the processor stores a string in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NewType

LeaseToken = NewType("LeaseToken", str)
"""The row key: the shard's name, for example `00`."""

HostId = NewType("HostId", str)
"""A host process: unique per process (the default is host name + pid)."""


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
    etag: str | None = None

    @property
    def is_free(self) -> bool:
        return self.owner is None

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
