"""Singleton jobs on the memory lease store with a hand-driven clock: one holder at a time, the
job taken over once its holder goes silent for an expiry, each run going on from the last."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leases import HostId, Lease, LeaseTable, LeaseToken, MemoryLeaseStore, job_token
from leases.policy.timings import derive_timings
from observers import JobRun
from processor.host.running import job_runner
from processor.host.running.drain_budget import DrainBudget
from processor.host.running.job_runner import (
    FINAL_WAIT_MIN_S,
    FinalStep,
    HolderRuns,
    JobRunner,
    final_step,
    final_wait_s,
)
from tests.unit.fakes import ManualClock

EXPIRY_S = 3.0


class CountingJob:
    """Counts runs; each continuation is the run's number, so the next run shows where the
    last one left off."""

    name = "state"
    every_s = 1.0

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, bool]] = []
        self.catches_up = True

    async def run(self, continuation: str | None, *, final: bool = False) -> JobRun:
        self.calls.append((continuation, final))
        return JobRun(str(int(continuation or 0) + 1), self.catches_up, summary={"n": 1})


class Looks:
    """A lease store whose reads of a row are queued for the test to step through: which row
    a host saw, look by look."""

    def __init__(self, store: MemoryLeaseStore) -> None:
        self.store = store
        self.seen: asyncio.Queue[Lease | None] = asyncio.Queue()

    async def get(self, token: LeaseToken) -> Lease | None:
        row = await self.store.get(token)
        await self.seen.put(row)
        return row

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def watched(
    store: MemoryLeaseStore, name: str, clock: ManualClock, *, every_s: float = 1.0
) -> tuple[JobRunner, Looks]:
    looks = Looks(store)
    me, timings = HostId(name), derive_timings(EXPIRY_S)
    job = CountingJob()
    job.every_s = every_s
    return JobRunner(job, store=cast(LeaseTable, looks), me=me, timings=timings, clock=clock), looks


def runner(store: MemoryLeaseStore, name: str, clock: ManualClock) -> tuple[JobRunner, CountingJob]:
    job = CountingJob()
    timings = derive_timings(EXPIRY_S)
    return JobRunner(job, store=store, me=HostId(name), timings=timings, clock=clock), job


async def a_then_b(
    store: MemoryLeaseStore, clock: ManualClock
) -> tuple[tuple[JobRunner, CountingJob], tuple[JobRunner, CountingJob]]:
    """Runners on hosts a and b that have each looked once: a first, so a holds the job."""
    a, b = runner(store, "a", clock), runner(store, "b", clock)
    await a[0].tick()
    await b[0].tick()
    return a, b


async def test_one_host_holds_the_job_until_it_goes_silent_then_another_takes_over() -> None:
    store, clock = MemoryLeaseStore(), ManualClock()
    (a, a_job), (b, b_job) = await a_then_b(store, clock)
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
    (a, a_job), (b, b_job) = await a_then_b(store, clock)
    # both caught up and leave: b waits for a, which runs once more and lets go, caught up
    await asyncio.gather(b.finish(final=True), a.finish(final=False))
    assert a_job.calls == [(None, False), ("1", True)] and b_job.calls == []
    [row] = await store.list_jobs()
    assert (row.owner, row.continuation, row.caught_up) == (None, "2", True)
    await b.tick()  # free: taken at once, no expiry to wait for
    assert b.is_holder and b_job.calls[-1] == ("2", False)


async def test_a_leaving_host_runs_the_job_itself_when_its_holder_died() -> None:
    store, clock = MemoryLeaseStore(), ManualClock()
    (_, a_job), (b, b_job) = await a_then_b(store, clock)
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
    assert final_step(held, me=me, is_expired=False, covered=True) is FinalStep.SKIP
    assert final_step(held, me=me, is_expired=True, covered=True) is FinalStep.TAKE


def test_a_holders_run_covers_a_leaving_host_once_a_second_one_checkpoints_caught_up() -> None:
    """The first checkpoint seen may be of a run that began before the wait; the run after it
    began after, and only a run that caught up covers what was committed."""
    held = Lease(job_token("state"), owner=HostId("a"), epoch=1, checkpoint_time=_t(0))
    runs = HolderRuns()
    assert not runs.covered(held)
    assert not runs.covered(dataclasses.replace(held, version=3))  # a renewal: no run
    assert not runs.covered(dataclasses.replace(held, checkpoint_time=_t(1), caught_up=True))
    assert not runs.covered(dataclasses.replace(held, checkpoint_time=_t(2)))  # not caught up
    assert runs.covered(dataclasses.replace(held, checkpoint_time=_t(3), caught_up=True))

    other = HolderRuns()  # a new holder's runs count from its own first row
    assert not other.covered(held)
    assert not other.covered(dataclasses.replace(held, checkpoint_time=_t(1), caught_up=True))
    stolen = dataclasses.replace(held, owner=HostId("b"), epoch=2, checkpoint_time=_t(2))
    assert not other.covered(stolen)
    assert not other.covered(dataclasses.replace(stolen, checkpoint_time=_t(3), caught_up=True))
    assert other.covered(dataclasses.replace(stolen, checkpoint_time=_t(4), caught_up=True))


def _t(s: int) -> datetime:
    return datetime.fromtimestamp(1_800_000_000 + s, UTC)


@given(
    expiry_s=st.floats(min_value=0.1, max_value=1e4),
    every_s=st.floats(min_value=0.1, max_value=1e4),
)
def test_a_leaving_host_waits_long_enough_for_a_holder_that_stays_to_run_twice(
    expiry_s: float, every_s: float
) -> None:
    wait_s = final_wait_s(expiry_s=expiry_s, every_s=every_s)
    assert wait_s > 2 * every_s and wait_s >= 4 * expiry_s and wait_s >= 120.0


async def test_a_leaving_host_leaves_the_job_to_a_holder_that_stays() -> None:
    """A holder that does not leave runs the job on its own schedule: the leaving host exits
    at the look after the second run it saw, caught up, not running the job beside it."""
    store, clock = MemoryLeaseStore(), ManualClock()
    a, a_job = runner(store, "a", clock)
    b, looks = watched(store, "b", clock)
    await a.tick()
    leaving = asyncio.create_task(b.finish(final=True))
    for _ in range(2):  # a look, then one of a's runs (its checkpoint a write the next look sees)
        assert (await looks.seen.get()) is not None and not leaving.done()
        clock.now += 1
        await a.tick()
    assert (await looks.seen.get()) is not None
    next_look = asyncio.create_task(looks.seen.get())
    done, _ = await asyncio.wait({leaving, next_look}, return_when=asyncio.FIRST_COMPLETED)
    next_look.cancel()
    assert leaving in done and b.runs == 0 and len(a_job.calls) == 3
    [row] = await store.list_jobs()
    assert (row.owner, row.epoch) == ("a", 1)


async def test_a_leaving_host_waits_for_a_live_holders_slow_runs_then_runs_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A live holder whose runs do not catch up (a slow last run, failing runs): the leaving
    host looks for `final_wait_s`, never running the job beside it until then."""
    monkeypatch.setattr(job_runner, "FINAL_POLL_S", 0)  # its looks: as often as the test steps
    store, clock = MemoryLeaseStore(), ManualClock()
    a, a_job = runner(store, "a", clock)
    a_job.catches_up = False
    b, looks = watched(store, "b", clock, every_s=60.0)  # a wait of 240 s
    await a.tick()
    step_s = EXPIRY_S * 0.9  # a's runs come within an expiry: it stays alive
    steps = math.ceil(final_wait_s(expiry_s=EXPIRY_S, every_s=60.0) / step_s)
    leaving = asyncio.create_task(b.finish(final=True))
    for _ in range(steps):
        await looks.seen.get()
        assert b.runs == 0 and not leaving.done()
        clock.now += step_s
        await a.tick()
    await leaving
    # b ran it once, after a's steps of the whole wait: more than two of the job's intervals
    # (a holder that stays runs it twice meanwhile) and than the least wait, in steps
    assert b.runs == 1 and len(a_job.calls) == 1 + steps
    assert steps > max(2 * math.ceil(60.0 / step_s), math.ceil(FINAL_WAIT_MIN_S / step_s))


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
