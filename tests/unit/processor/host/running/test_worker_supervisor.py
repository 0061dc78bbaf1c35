"""The workers of one host: a lease taken again while its earlier worker still ends waits for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from leases import HostId, Lease, LeaseToken, MemoryLeaseStore
from observers import CloseReason
from processor.host.leasing.held_lease import HeldLease
from processor.host.running.worker_supervisor import WorkerSupervisor
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


class Running:
    """A supervisor running over `Workers`, and one lease row to acquire."""

    def __init__(self) -> None:
        self.store, self.workers = MemoryLeaseStore(), Workers()
        self.supervisor = WorkerSupervisor(self.workers.run, clock=ManualClock(), fence_after_s=8)
        self.runner: asyncio.Task[None] | None = None

    async def row(self) -> Lease:
        row = await self.store.create_if_absent(LeaseToken("00"), None)
        assert row is not None
        return row


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    r = Running()
    r.runner = asyncio.create_task(r.supervisor.run())
    await _settle()
    yield r
    r.supervisor.close()
    await r.runner


async def test_a_lease_taken_again_runs_its_new_worker_only_after_the_earlier_one_ended(
    running: Running,
) -> None:
    store, workers, supervisor = running.store, running.workers, running.supervisor
    first = await _acquired(store, await running.row())
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
    assert supervisor.closed_reasons == {CloseReason.LEASE_LOST: 2}


async def test_nothing_starts_once_the_host_closes(running: Running) -> None:
    row = await running.row()
    running.supervisor.close()
    assert not running.supervisor.start(await _acquired(running.store, row))
    assert running.workers.events == []
