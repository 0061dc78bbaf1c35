"""A lease this host holds: fencing by time, and what a refused or released write means."""

from __future__ import annotations

from leases import HostId, Lease, LeaseToken, MemoryLeaseStore
from processor.host.leasing.held_lease import HeldLease
from tests.unit.fakes import ManualClock

FENCE_AFTER_S = 8.0


async def held() -> tuple[HeldLease, MemoryLeaseStore, ManualClock]:
    store, clock = MemoryLeaseStore(), ManualClock()
    row = await store.create_if_absent(LeaseToken("00"), None)
    assert row is not None
    lease = await store.acquire(row, HostId("h1"))
    assert lease is not None
    return HeldLease(lease, clock=clock, fence_after_s=FENCE_AFTER_S), store, clock


async def test_a_lease_not_renewed_within_the_fencing_interval_is_lost() -> None:
    lease, store, clock = await held()
    clock.now += FENCE_AFTER_S - 1
    assert lease.is_usable()
    assert await lease.renew(store) is not None  # renewed: the interval starts again
    clock.now += FENCE_AFTER_S - 1
    assert lease.is_fresh() and lease.is_usable()
    clock.now += 1
    assert not lease.is_fresh() and not lease.is_lost  # is_fresh marks nothing
    assert not lease.is_usable() and lease.is_lost


async def test_a_write_the_store_refuses_loses_the_lease_and_no_write_follows() -> None:
    lease, store, _ = await held()
    row = await store.get(lease.token)
    assert row is not None and await store.acquire(row, HostId("h2")) is not None
    assert await lease.renew(store) is None and lease.is_lost
    calls: list[Lease] = []

    async def write(row: Lease) -> Lease | None:
        calls.append(row)
        return row

    assert await lease.write(write) is None and calls == []


async def test_a_hand_over_asked_for_is_seen_and_a_release_ends_ownership() -> None:
    lease, store, _ = await held()
    row = await store.get(lease.token)
    assert row is not None and await store.request_handover(row, HostId("h2")) is not None
    assert await lease.renew(store) is not None
    assert lease.handover.is_set() and not lease.is_lost
    assert await lease.write(store.release) is not None
    assert lease.is_lost  # released: not ours to renew or write any more
