"""The shielded, timed release: it keeps the continuation, parks with the error, and neither a
store that does not answer nor a cancelled caller cuts it in half."""

from __future__ import annotations

import asyncio

import pytest

from leases import HostId, Lease, LeaseToken, MemoryLeaseStore
from processor.host.leasing.held_lease import HeldLease
from processor.host.leasing.release import let_go
from tests import patience
from tests.unit.fakes import ManualClock


async def held(store: MemoryLeaseStore) -> HeldLease:
    row = await store.create_if_absent(LeaseToken("00"), '{"segment": "s"}')
    assert row is not None
    got = await store.acquire(row, HostId("h1"))
    assert got is not None
    return HeldLease(got, clock=ManualClock(), fence_after_s=20)


async def test_a_release_keeps_the_continuation_and_ends_the_hold() -> None:
    store = MemoryLeaseStore()
    lease = await held(store)
    released = await let_go(lease, store, timeout_s=patience.left_s())
    assert released is not None and released.owner is None
    assert released.continuation == '{"segment": "s"}' and lease.is_lost


async def test_a_park_keeps_the_error_for_the_operator() -> None:
    store = MemoryLeaseStore()
    parked = await let_go(
        await held(store), store, timeout_s=patience.left_s(), error="bad chunk", park=True
    )
    assert parked is not None and parked.parked and parked.error == "bad chunk"


class SlowStore(MemoryLeaseStore):
    """Answers a release only once let through."""

    def __init__(self) -> None:
        super().__init__()
        self.let_through = asyncio.Event()

    async def release(self, held: Lease, *, error: str = "") -> Lease | None:
        await self.let_through.wait()
        return await super().release(held, error=error)


async def test_a_store_that_does_not_answer_times_out_and_the_write_still_lands() -> None:
    store = SlowStore()
    lease = await held(store)
    with pytest.raises(TimeoutError):
        await let_go(lease, store, timeout_s=0.01)  # fixed on purpose: it never answers in time
    store.let_through.set()
    # the shielded write ran on: a later write waits for it, then finds the lease let go
    assert await lease.renew(store) is None
    row = await store.get(LeaseToken("00"))
    assert row is not None and row.owner is None and lease.is_lost
