"""Singleton jobs on the memory lease store with a hand-driven clock: one holder at a time, the
job taken over once its holder goes silent for an expiry, each run going on from the last."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from leases import HostId, Lease, MemoryLeaseStore, job_token
from leases.policy.timings import derive_timings
from observers import JobRun
from processor.host.ownership.drain_budget import DrainBudget
from processor.host.ownership.job_runner import FinalStep, JobRunner, final_step
from tests.unit.fakes import ManualClock

EXPIRY_S = 3.0


class CountingJob:
    """Counts runs; each continuation is the run's number, so the next run shows where the
    last one left off."""

    name = "state"
    every_s = 1.0

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, bool]] = []

    async def run(self, continuation: str | None, *, final: bool = False) -> JobRun:
        self.calls.append((continuation, final))
        return JobRun(str(int(continuation or 0) + 1), is_caught_up=True, summary={"n": 1})


def runner(store: MemoryLeaseStore, name: str, clock: ManualClock) -> tuple[JobRunner, CountingJob]:
    job = CountingJob()
    timings = derive_timings(EXPIRY_S)
    return JobRunner(job, store=store, me=HostId(name), timings=timings, clock=clock), job


async def test_one_host_holds_the_job_until_it_goes_silent_then_another_takes_over() -> None:
    store, clock = MemoryLeaseStore(), ManualClock()
    a, a_job = runner(store, "a", clock)
    b, b_job = runner(store, "b", clock)
    await a.tick()
    await b.tick()
    assert a.is_holder and not b.is_holder
    assert a_job.calls == [(None, False)] and b_job.calls == []
    await a.tick()  # runs again from where it left off
    assert a_job.calls[-1] == ("1", False)

    clock.now += EXPIRY_S / 2
    await b.tick()  # a's row has not changed for less than an expiry: still a's
    assert not b.is_holder
    clock.now += EXPIRY_S  # a went silent (no renewal, no run) for longer than an expiry
    await b.tick()
    assert b.is_holder and b_job.calls == [("2", False)]  # goes on from a's last run
    assert (a.looks, b.looks) == (1, 3)  # b took it at its third look; a at its first
    [row] = await store.list_jobs()
    assert (row.token, row.owner, row.epoch, row.continuation) == (job_token("state"), "b", 2, "3")
    assert await store.list_leases() == []  # a job's lease is not a shard's

    await a.tick()  # a wakes up (a zombie): its write is refused, it learns it lost the job
    assert not a.is_holder and len(a_job.calls) == 2


async def test_a_leaving_holder_runs_once_more_and_the_others_leave_it_that_run() -> None:
    store, clock = MemoryLeaseStore(), ManualClock()
    a, a_job = runner(store, "a", clock)
    b, b_job = runner(store, "b", clock)
    await a.tick()
    await b.tick()
    # both caught up and leave: b waits for a, which runs once more and lets go, caught up
    await asyncio.gather(b.finish(final=True), a.finish(final=False))
    assert a_job.calls == [(None, False), ("1", True)] and b_job.calls == []
    [row] = await store.list_jobs()
    assert (row.owner, row.continuation, row.caught_up) == (None, "2", True)
    await b.tick()  # free: taken at once, no expiry to wait for
    assert b.is_holder and b_job.calls[-1] == ("2", False)


async def test_a_leaving_host_runs_the_job_itself_when_its_holder_died() -> None:
    store, clock = MemoryLeaseStore(), ManualClock()
    a, a_job = runner(store, "a", clock)
    b, b_job = runner(store, "b", clock)
    await a.tick()
    await b.tick()
    assert a_job.calls == [(None, False)] and not b_job.calls  # a holds it and ran it
    clock.now += EXPIRY_S + 1  # a died: no renewal since
    await b.finish(final=True)
    assert b_job.calls == [("1", True)]  # from a's last run, taking the lease for it
    [row] = await store.list_jobs()
    assert (row.owner, row.epoch, row.continuation) == (None, 2, "2")


def test_what_a_leaving_host_does_about_the_last_run() -> None:
    me, other = HostId("me"), HostId("other")
    row = Lease(job_token("state"))
    assert final_step(None, me=me, is_expired=False) is FinalStep.TAKE
    assert final_step(row, me=me, is_expired=False) is FinalStep.TAKE  # free, not caught up
    done = dataclasses.replace(row, caught_up=True)
    assert final_step(done, me=me, is_expired=False) is FinalStep.SKIP
    held = dataclasses.replace(row, owner=other)
    assert final_step(held, me=me, is_expired=False) is FinalStep.WAIT
    assert final_step(held, me=me, is_expired=True) is FinalStep.TAKE


async def test_a_job_that_waits_runs_first_one_wait_after_its_lease_is_taken() -> None:
    store, clock = MemoryLeaseStore(), ManualClock()
    a, job = runner(store, "a", clock)
    job.first_run_after_s = 2.0  # type: ignore[attr-defined]  (below the fence: 2.4 s)
    await a.tick()
    assert a.is_holder and job.calls == []  # taken, not run
    assert a._pause() == 2.0
    clock.now += 2.0
    await a.tick()
    assert job.calls == [(None, False)] and a._pause() == job.every_s
    await a.finish(final=True)  # a leaving holder's last run is never held back
    assert job.calls[-1] == ("1", True)


class SlowJob(CountingJob):
    """Its runs after the first never return (a MERGE on a Spark that does not answer)."""

    async def run(self, continuation: str | None, *, final: bool = False) -> JobRun:
        if self.calls:
            self.calls.append((continuation, final))
            await asyncio.Event().wait()
        return await super().run(continuation, final=final)


async def test_a_stop_whose_budget_runs_out_in_the_last_run_leaves_the_lease_to_expire() -> None:
    """Released while its run may still commit, another host's run could overlap it: a holder
    whose last run was cut short by the drain's budget keeps the lease until it expires."""
    store, clock = MemoryLeaseStore(), ManualClock()
    job = SlowJob()
    a = JobRunner(job, store=store, me=HostId("a"), timings=derive_timings(EXPIRY_S), clock=clock)
    await a.tick()
    drain = DrainBudget(0.05, time.monotonic)
    drain.begin()
    await a.finish(final=False, drain=drain)
    assert job.calls == [(None, False), ("1", True)]  # the last run began, never ended
    assert drain.cut == ["the state job's last run"]
    [row] = await store.list_jobs()
    assert row.owner == "a"  # not released

    spent = DrainBudget(0.0, time.monotonic)
    spent.begin()
    b_job = CountingJob()
    b = JobRunner(b_job, store=store, me=HostId("b"), timings=derive_timings(EXPIRY_S), clock=clock)
    await b.tick()  # a's row seen, then unchanged for longer than an expiry
    clock.now += 2 * EXPIRY_S
    await b.tick()
    await b.finish(final=False, drain=spent)  # no budget left: the run is not even begun
    assert b_job.calls == [("1", False)] and spent.cut == ["the state job's last run"]
    [row] = await store.list_jobs()
    assert row.owner is None and row.continuation == "2"  # no run cut short: released
