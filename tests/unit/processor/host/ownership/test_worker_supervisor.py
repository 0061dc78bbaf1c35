"""The workers of one host: a lease taken again while its earlier worker still ends waits for it."""

from __future__ import annotations

import asyncio

from leases import HostId, Lease, LeaseToken, MemoryLeaseStore
from observers import CloseReason
from processor.host.ownership.held_lease import HeldLease
from processor.host.ownership.worker_supervisor import WorkerSupervisor
from tests.unit.fakes import ManualClock


class Workers:
    """Workers that record when they start and end only when the test lets them."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.release: dict[int, asyncio.Event] = {}

    async def run(self, held: HeldLease) -> CloseReason:
        self.events.append(f"start@{held.epoch}")
        done = self.release.setdefault(held.epoch, asyncio.Event())
        await done.wait()
        self.events.append(f"end@{held.epoch}")
        return CloseReason.LEASE_LOST


async def _acquired(store: MemoryLeaseStore, seen: Lease) -> Lease:
    got = await store.acquire(seen, HostId("h1"))
    assert got is not None
    return got


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_lease_taken_again_runs_its_new_worker_only_after_the_earlier_one_ended() -> None:
    store, workers = MemoryLeaseStore(), Workers()
    supervisor = WorkerSupervisor(workers.run, clock=ManualClock(), fence_after_s=8)
    runner = asyncio.create_task(supervisor.run())
    await _settle()
    row = await store.create_if_absent(LeaseToken("00"), None)
    assert row is not None
    first = await _acquired(store, row)
    assert supervisor.start(first)
    await _settle()
    assert not supervisor.start(first)  # its worker runs: no second one
    [held] = supervisor.held()
    held.lost.set()  # lost while its observer still finishes writing
    assert supervisor.tokens() == set()  # the balancer may take it again
    second = await _acquired(store, first)
    assert supervisor.start(second)
    await _settle()
    assert workers.events == ["start@1"]  # the new worker waits...
    assert [h.epoch for h in supervisor.held()] == [2]  # ...its lease renewed meanwhile
    assert supervisor.tokens() == {LeaseToken("00")}
    workers.release[1].set()
    await _settle()
    assert workers.events == ["start@1", "end@1", "start@2"]
    assert supervisor.tokens() == {LeaseToken("00")}  # the earlier one's end removed nothing
    workers.release[2].set()
    await _settle()
    assert supervisor.tokens() == set() and supervisor.held() == []
    supervisor.close()
    await runner
    assert supervisor.closed_reasons == {CloseReason.LEASE_LOST: 2}


async def test_nothing_starts_once_the_host_closes() -> None:
    store, workers = MemoryLeaseStore(), Workers()
    supervisor = WorkerSupervisor(workers.run, clock=ManualClock(), fence_after_s=8)
    runner = asyncio.create_task(supervisor.run())
    await _settle()
    row = await store.create_if_absent(LeaseToken("00"), None)
    assert row is not None
    supervisor.close()
    assert not supervisor.start(await _acquired(store, row))
    await runner
    assert workers.events == []
