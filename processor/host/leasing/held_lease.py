"""A lease this host holds: the latest snapshot, shared by its worker and the renewer.

All writes to one held lease go through here, one at a time, so the renewer and the worker
never race each other with the same ETag. Whoever learns that the lease is gone (a refused
write, or renewal failing for too long) marks it lost; the worker checks before every batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from leases import Lease, LeaseTable, LeaseToken
from processor.clock import Clock


class HeldLease:
    def __init__(self, lease: Lease, *, clock: Clock, fence_after_s: float) -> None:
        assert lease.owner is not None
        self.lease = lease
        self.host = lease.owner
        self.epoch = lease.epoch
        self._clock = clock
        self._fence_after_s = fence_after_s
        self.confirmed_at = clock.monotonic()  # send time of the last write that succeeded
        self.lost = asyncio.Event()
        self.handover = asyncio.Event()  # another host asked for it
        self._lock = asyncio.Lock()
        self._note(lease)

    @property
    def token(self) -> LeaseToken:
        return self.lease.token

    @property
    def is_lost(self) -> bool:
        return self.lost.is_set()

    def is_usable(self) -> bool:
        """Ours, and renewed recently enough that no other host can have judged it expired."""
        if self.is_fresh():
            return True
        self.lost.set()  # self-fencing: we could not renew in time
        return False

    def is_fresh(self) -> bool:
        """`is_usable` without marking the lease lost, so safe in any thread: the check a plain
        observer method's thread makes just before the method sees a batch."""
        return (
            not self.lost.is_set()
            and self._clock.monotonic() - self.confirmed_at < self._fence_after_s
        )

    def _note(self, lease: Lease) -> None:
        self.lease = lease
        if lease.next_owner is not None and lease.next_owner != self.host:
            self.handover.set()

    async def write(self, op: Callable[[Lease], Awaitable[Lease | None]]) -> Lease | None:
        """Run one store write on the current snapshot. None (and the lease marked lost) when
        the store says it is no longer ours. Store errors propagate; the lease stays held."""
        async with self._lock:
            if self.lost.is_set():
                return None
            sent = self._clock.monotonic()
            result = await op(self.lease)
            if result is None:
                self.lost.set()
                return None
            self.confirmed_at = sent
            self._note(result)
            if result.owner != self.host:
                self.lost.set()  # released: from now on it is not ours to renew or write
            return result

    async def renew(self, store: LeaseTable, *, load: float | None = None) -> Lease | None:
        return await self.write(lambda lease: store.renew(lease, load=load))
