"""The lease store: a narrow async protocol, and the write policy both implementations share.

Every write is conditional on the ETag of the snapshot it starts from. What happens when that
condition fails is decided here, once, for both stores:

- acquire, steal and hand-over requests, and an operator's move or resume, are decisions made on
  a snapshot: if the row changed, the decision is stale and the call returns None (the balancer
  plans again next tick; the operator is told);
- renew, checkpoint, release and park are made by the owner: on a changed row we re-read, and if the
  row still shows us as owner at our epoch (another field changed, say a hand-over request) the
  write is re-applied to the fresh row; otherwise the lease is lost and the call returns None;
- a write whose reply was lost (timeout, dropped connection) is judged by re-reading: if the row
  shows exactly our write it succeeded; if it is unchanged it is tried again; else as above.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from leases.errors import LeaseStoreUnavailable
from leases.record import MAX_MOVES, Delivered, HostId, Lease, LeaseMove, LeaseToken
from leases.reserved_rows import (
    JOB_ROW_PREFIX,
    RESERVED_ROWS_FROM,
    BalanceNote,
    HostReport,
    ProcessorState,
    key_range,
)

# Attempts for one store call that keeps failing transiently (then LeaseStoreUnavailable).
READ_ATTEMPTS = 4
# Re-applications of an owner's write after the row changed under it while still ours. A hand-over
# request or our own concurrent write can each cause one; more means something is wrong.
OWNER_WRITE_ATTEMPTS = 5


class HostRows(Protocol):
    """The hosts' own rows (`leases.reserved_rows`): what presence writes and `cfp status` and the
    balancer's peer count read."""

    async def publish_host(self, report: HostReport) -> None:
        """Write this host's own row (see `leases.reserved_rows`)."""
        ...

    async def list_hosts(self) -> list[HostReport]: ...

    async def delete_host(self, name: str) -> None: ...


class ProcessorRows(Protocol):
    """The processor's own rows: paused or not, the balance note, its identity and how its
    leases are partitioned."""

    async def processor_state(self) -> ProcessorState:
        """The processor row: paused or not (`leases.reserved_rows`)."""
        ...

    async def set_processor_state(self, state: ProcessorState) -> None: ...

    async def note_balance(self, note: BalanceNote) -> None:
        """Leave `note` on the processor row (merged: the paused state stays as it is)."""
        ...

    async def identity(self) -> str | None:
        """The processor's identity row (opaque text), None before it was claimed."""
        ...

    async def claim_identity(self, text: str, *, lease_partitions: int = 1) -> str:
        """Write `text` as the processor's identity unless one exists, with the number of table
        partitions its leases are spread over; the stored identity (ours when we were first).
        Never replaces one: hosts that start together agree."""
        ...

    async def lease_partitions(self) -> int:
        """The number of partitions the processor's leases are spread over (1: one)."""
        ...


class LeaseTable(Protocol):
    """The leases themselves: listings and the conditional writes of owners and operators.
    Writes return the new snapshot, or None when the conditional write lost (see the module
    docstring for when a lost race is retried)."""

    async def list_leases(self) -> list[Lease]: ...

    async def list_range(self, lo: str, hi: str) -> list[Lease]:
        """The leases whose token is in [lo, hi) (a quiet tick's watched slice)."""
        ...

    async def list_jobs(self) -> list[Lease]:
        """The job leases of the processor (`leases.reserved_rows.job_token`)."""
        ...

    async def get(self, token: LeaseToken) -> Lease | None: ...

    async def create_if_absent(self, token: LeaseToken, continuation: str | None) -> Lease | None:
        """Insert a free lease; None when a row for `token` already exists (someone else won)."""
        ...

    async def acquire(self, seen: Lease, owner: HostId) -> Lease | None:
        """Make `owner` the owner of `seen` at the next epoch (free, expired or stolen)."""
        ...

    async def request_handover(self, seen: Lease, taker: HostId) -> Lease | None:
        """Ask the owner of `seen` to hand the lease over to `taker` (sets `next_owner`). Still
        done if the owner wrote since `seen` (renewal, checkpoint); None once the lease changed
        owner or epoch, or another host asked first."""
        ...

    async def renew(self, held: Lease, *, load: float | None = None) -> Lease | None:
        """Show the lease is still held; `load` (the owner's read rate, bytes/s) is written with
        it when given."""
        ...

    async def checkpoint(
        self,
        held: Lease,
        continuation: str,
        *,
        caught_up: bool,
        when: datetime,
        dead_letters: int = 0,
        delivered: Delivered | None = None,
        gap: LeaseMove | None = None,
    ) -> Lease | None:
        """Store the owner's position; `dead_letters` batches given up on are added to its count,
        `delivered` to its event counters, and `gap` (a retention gap just stepped over) to its
        gaps."""
        ...

    async def release(self, held: Lease, *, error: str = "") -> Lease | None:
        """Clear the owner and keep the continuation (and any hand-over request)."""
        ...

    async def park(self, held: Lease, *, error: str) -> Lease | None:
        """Release for good: no host takes the lease again until an operator moves or resumes
        it (the continuation stays in front of what stopped it)."""
        ...

    async def move(self, seen: Lease, continuation: str, move: LeaseMove) -> Lease | None:
        """An operator's move of a lease no host holds: new continuation, not parked, the move
        recorded. None when the row changed since `seen` or is owned."""
        ...

    async def resume(self, seen: Lease) -> Lease | None:
        """Un-park a lease at its position (after the cause was fixed outside). None when the
        row changed since `seen` or is owned."""
        ...

    async def reset(self, seen: Lease, continuation: str, move: LeaseMove) -> Lease | None:
        """An operator's reset of a lease no live host holds (the caller judged its owner gone):
        new continuation, no owner, the next epoch (an old owner that wakes up can write nothing
        more), not parked, the move recorded. None when the row changed since `seen`."""
        ...


class LeaseStore(LeaseTable, HostRows, ProcessorRows, Protocol):
    """Every role of a lease table at once: what a store implements, and what the parts that
    need all of it (the balancer, the operator reports) take. Each part takes only the role it
    uses when that is one.

    Errors: `LeaseStoreUnavailable` when the store does not answer after bounded retries,
    `LeaseStoreMisconfigured` when it refuses us for good.
    """


def _is_retryable(e: BaseException) -> bool:
    return bool(getattr(e, "retryable", False))


def retrying() -> AsyncRetrying:
    """Bounded, jittered retries of transient store failures (only errors marked `retryable`)."""
    return AsyncRetrying(
        retry=retry_if_exception(_is_retryable),
        stop=stop_after_attempt(READ_ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.05, max=1.0),
        reraise=True,
    )


class ConditionalLeaseStore(abc.ABC):
    """The write policy over four primitives a backend provides.

    Backends implement `_list` (the rows whose RowKey is in [lo, hi)), `_read`, `_insert`
    (None on "exists") and `_replace` (None on "ETag did not match"); each raises
    `LeaseStoreUnavailable` for a transient failure, whose outcome (for writes) is unknown.
    """

    @abc.abstractmethod
    async def _list(self, lo: str, hi: str) -> list[Lease]: ...

    @abc.abstractmethod
    async def _read(self, token: LeaseToken) -> Lease | None: ...

    @abc.abstractmethod
    async def _insert(self, lease: Lease) -> Lease | None: ...

    @abc.abstractmethod
    async def _replace(self, lease: Lease, etag: str) -> Lease | None: ...

    async def list_leases(self) -> list[Lease]:
        return await self._list_sorted("", RESERVED_ROWS_FROM)

    async def list_range(self, lo: str, hi: str) -> list[Lease]:
        return await self._list_sorted(lo, min(hi, RESERVED_ROWS_FROM))

    async def list_jobs(self) -> list[Lease]:
        return await self._list_sorted(*key_range(JOB_ROW_PREFIX))

    async def _list_sorted(self, lo: str, hi: str) -> list[Lease]:
        async for attempt in retrying():
            with attempt:
                return sorted(await self._list(lo, hi), key=lambda lease: lease.token)
        raise AssertionError("unreachable")  # pragma: no cover

    async def get(self, token: LeaseToken) -> Lease | None:
        async for attempt in retrying():
            with attempt:
                return await self._read(token)
        raise AssertionError("unreachable")  # pragma: no cover

    async def create_if_absent(self, token: LeaseToken, continuation: str | None) -> Lease | None:
        fresh = Lease(token=token, continuation=continuation)
        for _ in range(READ_ATTEMPTS):
            try:
                return await self._insert(fresh)
            except LeaseStoreUnavailable:
                row = await self.get(token)
                if row is not None:
                    # ours landed or another host's did: either way the row exists exactly once;
                    # report "created" only when it is still the untouched row we wrote
                    return row if row.version == 0 and row.continuation == continuation else None
        raise LeaseStoreUnavailable(f"lease {token}: create did not get through")

    async def acquire(self, seen: Lease, owner: HostId) -> Lease | None:
        return await self._decide(
            seen,
            lambda row: dataclasses.replace(
                row, owner=owner, epoch=row.epoch + 1, next_owner=None, error=""
            ),
        )

    async def request_handover(self, seen: Lease, taker: HostId) -> Lease | None:
        # A busy owner checkpoints after every batch, so the row has often changed since the
        # listing; the request still stands while the same owner holds it at the same epoch and
        # nobody else asked first.
        def still_stands(row: Lease) -> bool:
            return row.next_owner in (None, taker)

        if seen.owner is None:
            return None  # free: nothing to ask, the next tick may acquire it
        return await self._while_held(
            seen, lambda row: dataclasses.replace(row, next_owner=taker), still_stands
        )

    async def renew(self, held: Lease, *, load: float | None = None) -> Lease | None:
        if load is None:
            return await self._as_owner(held, lambda row: row)
        return await self._as_owner(held, lambda row: dataclasses.replace(row, load=load))

    async def checkpoint(
        self,
        held: Lease,
        continuation: str,
        *,
        caught_up: bool,
        when: datetime,
        dead_letters: int = 0,
        delivered: Delivered | None = None,
        gap: LeaseMove | None = None,
    ) -> Lease | None:
        d = delivered or Delivered()
        gaps = () if gap is None else (gap,)
        return await self._as_owner(
            held,
            lambda row: dataclasses.replace(
                row,
                continuation=continuation,
                caught_up=caught_up,
                checkpoint_time=when,
                dead_letters=row.dead_letters + dead_letters,
                events=row.events + d.events,
                event_bytes=row.event_bytes + d.event_bytes,
                last_event_time=d.last_event_time or row.last_event_time,
                gaps=(*row.gaps, *gaps)[-MAX_MOVES:],
            ),
        )

    async def release(self, held: Lease, *, error: str = "") -> Lease | None:
        return await self._as_owner(
            held, lambda row: dataclasses.replace(row, owner=None, error=error)
        )

    async def park(self, held: Lease, *, error: str) -> Lease | None:
        return await self._as_owner(
            held,
            lambda row: dataclasses.replace(
                row, owner=None, error=error, parked=True, caught_up=False
            ),
        )

    async def move(self, seen: Lease, continuation: str, move: LeaseMove) -> Lease | None:
        if seen.owner is not None:
            return None
        return await self._decide(
            seen,
            lambda row: dataclasses.replace(
                row,
                continuation=continuation,
                parked=False,
                error="",
                caught_up=False,
                moves=(*row.moves, move)[-MAX_MOVES:],
            ),
        )

    async def resume(self, seen: Lease) -> Lease | None:
        if seen.owner is not None:
            return None
        return await self._decide(
            seen, lambda row: dataclasses.replace(row, parked=False, error="")
        )

    async def reset(self, seen: Lease, continuation: str, move: LeaseMove) -> Lease | None:
        return await self._decide(
            seen,
            lambda row: dataclasses.replace(
                row,
                owner=None,
                epoch=row.epoch + 1,
                next_owner=None,
                continuation=continuation,
                parked=False,
                error="",
                caught_up=False,
                moves=(*row.moves, move)[-MAX_MOVES:],
            ),
        )

    async def _write(
        self, base: Lease, change: Callable[[Lease], Lease]
    ) -> tuple[bool, Lease | None]:
        """Apply `change` to `base` conditionally. Returns (done, row): done with the new row, or
        not done with the current row (None when it is gone) to decide on."""
        intended = dataclasses.replace(change(base), version=base.version + 1)
        assert base.etag is not None, "a stored lease has an etag"
        for _ in range(READ_ATTEMPTS):
            try:
                written = await self._replace(intended, base.etag)
            except LeaseStoreUnavailable:
                row = await self.get(base.token)  # the reply was lost: did the write land?
                if row is not None and row.same_write(intended):
                    return True, row
                if row is not None and row.etag == base.etag:
                    continue  # it did not: the row is untouched, try again
                return False, row
            if written is not None:
                return True, written
            return False, await self.get(base.token)
        raise LeaseStoreUnavailable(f"lease {base.token}: write did not get through")

    async def _decide(self, seen: Lease, change: Callable[[Lease], Lease]) -> Lease | None:
        done, row = await self._write(seen, change)
        return row if done else None

    async def _as_owner(self, held: Lease, change: Callable[[Lease], Lease]) -> Lease | None:
        return await self._while_held(held, change, lambda row: True)

    async def _while_held(
        self, held: Lease, change: Callable[[Lease], Lease], stands: Callable[[Lease], bool]
    ) -> Lease | None:
        """Write `change`, re-applied on a fresh row as long as the row shows the same owner at
        the same epoch and `stands(row)`; None once it does not."""
        assert held.owner is not None, "only an owned lease is written this way"
        base: Lease | None = held
        for _ in range(OWNER_WRITE_ATTEMPTS):
            if base is None or not base.is_held_by(held.owner, held.epoch) or not stands(base):
                return None  # another host acquired it, it was released, or it no longer stands
            done, row = await self._write(base, change)
            if done:
                return row
            base = row
        raise LeaseStoreUnavailable(f"lease {held.token}: the row kept changing under its owner")
