"""Singleton jobs: each runs on the one host that holds the job's own lease.

Driven by the host, one `JobRunner` per job its observer factory offers (`SingletonJob`; the
Spark observer's state job). A runner that holds nothing reads the job's lease row every
acquire interval (creating it once: insert-if-absent, the first host wins) and takes it when it
is free or expired, judged on this host's own clock like every lease. The holder runs the job
every `every_s` seconds and checkpoints what each run returns into the row, so that the next
holder goes on from there; the renewer renews the row with the host's other leases, and a holder
whose renewals fail for the fencing interval stops running the job (another host takes it once
it expires). A draining holder runs the job once more, so that what its own workers just
committed is not left for the next holder, and lets go of it (`finish`).

With `--until-caught-up` the holder's last act is one final run; every other host waits until
the holder has let go of the job caught up, or has checkpointed, caught up, a run that began
after the wait did (a holder that stays), or takes the lease and does the run itself when the
lease is free and not caught up or its holder went silent (died just before): the processor's
output is complete when the last host exits. It runs the job beside a live holder only after
the longest the holder's runs should take (`final_wait_s`): a run of the holder that outlasts a
fixed wait is most likely slow because the machine is busy, and a second run beside it slows
both.
"""

from __future__ import annotations

import asyncio
import random
from datetime import datetime
from enum import Enum

import structlog
from prometheus_client import CollectorRegistry

from leases import ExpiryTracker, HostId, Lease, LeaseError, LeaseTable, job_token
from leases.policy.timings import Timings
from observers import JobRun, SingletonJob, first_run_after_s
from processor.clock import Clock
from processor.host.health.host_progress import JobRecorder
from processor.host.leasing.held_lease import HeldLease
from processor.host.leasing.release import let_go
from processor.host.leasing.taking import take_job_lease
from processor.host.running.drain_budget import DrainBudget
from processor.waiting import wait_any

log = structlog.get_logger("cfp.jobs")

FINAL_POLL_S = 0.2  # how often a leaving host looks whether the holder did the last run
FINAL_WAIT_MIN_S = 120.0  # the least of the longest it waits for that (`final_wait_s`)


class FinalStep(Enum):
    """What a host that caught up and leaves, without holding a job's lease, does about the job's
    last run."""

    SKIP = "skip"
    """The holder ran it as it left (it let go with the job caught up): nothing more to do."""
    TAKE = "take"
    """Nobody will: the lease is free and not caught up, or its holder went silent; take the
    lease and run it."""
    WAIT = "wait"
    """A live holder will run it as it leaves, or as it stays: look again shortly."""


def final_step(
    row: Lease | None, *, me: HostId, is_expired: bool, covered: bool = False
) -> FinalStep:
    """`covered`: the holder checkpointed, caught up, a run that began after the wait did
    (`HolderRuns`)."""
    if row is None or row.owner == me or is_expired:
        return FinalStep.TAKE
    if row.owner is None:
        return FinalStep.SKIP if row.caught_up else FinalStep.TAKE
    return FinalStep.SKIP if covered else FinalStep.WAIT


def final_wait_s(*, expiry_s: float, every_s: float) -> float:
    """How long a leaving host waits for a live holder before it runs the job itself: long
    enough for a holder that stays to run it twice (`HolderRuns`; runs of up to a minute each),
    or for one that leaves to finish a slow last run."""
    return max(FINAL_WAIT_MIN_S, 4 * expiry_s, 2 * every_s + FINAL_WAIT_MIN_S)


class HolderRuns:
    """The checkpoints a leaving host sees its holder write while it waits. Runs follow one
    another on the holder, so the run after the first checkpoint seen began after the wait did:
    its checkpoint, caught up, covers everything this host committed before waiting."""

    def __init__(self) -> None:
        self._first: Lease | None = None
        self._seen: set[datetime | None] = set()  # checkpoint times since the first row

    def covered(self, row: Lease | None) -> bool:
        """Whether `row` shows a second checkpoint, caught up, by its holder (at one epoch)
        since the first row seen."""
        if row is None or row.owner is None:
            return False
        if self._first is None:
            self._first = row
            return False
        if (row.owner, row.epoch) != (self._first.owner, self._first.epoch):
            self._first, self._seen = row, set()  # another holder: count its own runs
            return False
        if row.checkpoint_time != self._first.checkpoint_time:
            self._seen.add(row.checkpoint_time)
        return len(self._seen) >= 2 and row.caught_up


class JobRunner:
    def __init__(
        self,
        job: SingletonJob,
        *,
        store: LeaseTable,
        me: HostId,
        timings: Timings,
        clock: Clock,
        progress: JobRecorder | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.job = job
        self.token = job_token(job.name)
        self._store = store
        self._me = me
        self._timings = timings
        self._clock = clock
        self._progress = progress or JobRecorder(CollectorRegistry())
        self._rng = rng or random.Random()
        self._held: HeldLease | None = None
        self._first_run_at = 0.0  # monotonic: not before, after taking the lease
        self._tracker = ExpiryTracker(timings.expiry_s)
        self._continuation: str | None = None
        self.runs = 0
        self._run_unfinished = False  # a run cancelled before it returned (a drain cut short)
        self.looks = 0  # at the lease while not holding it: how soon it was taken, in looks
        self.log = log.bind(job=job.name)

    def held(self) -> list[HeldLease]:
        """The job's lease while this host holds it (for the renewer)."""
        return [self._held] if self._held is not None and not self._held.is_lost else []

    @property
    def is_holder(self) -> bool:
        return self._held is not None and self._held.is_usable()

    async def run(self, stop: asyncio.Event) -> None:
        """`tick` every `every_s` while holding the lease, every acquire interval (jittered)
        while not, until `stop`. Errors of the lease store and of the job are logged, never
        raised."""
        while not stop.is_set():
            await self.tick()
            await wait_any(stop, *self._lost(), timeout_s=self._pause())

    def _pause(self) -> float:
        """Until the next run while holding the lease (the first one: until it is due); else the
        jittered acquire interval, or less when the holder's lease would expire before then
        (taken right after it does)."""
        if self.is_holder:
            first_in = self._first_run_at - self._clock.monotonic()
            return first_in if first_in > 0 else self.job.every_s
        due = self._tracker.next_expiry(self._me)
        return self._timings.next_look(self._rng, due=due, now=self._clock.monotonic())

    async def tick(self) -> None:
        """One round: take the job's lease if it is free or expired, then run the job once if
        this host holds it."""
        if not self.is_holder:
            self._held = None
            self.looks += 1
            self._progress.looks.labels(self.job.name).inc()
            try:
                await self._try_take()
            except LeaseError as e:
                self.log.warning("job.take_failed", error=str(e))
        if self.is_holder and self._clock.monotonic() >= self._first_run_at:
            await self._run_once(final=False)

    async def finish(self, *, final: bool, drain: DrainBudget | None = None) -> None:
        """After the host's workers are done: one last run when holding the lease, then let go
        of it, keeping its continuation. With `final` (the processor caught up) a host that
        does not hold it waits for the holder to do that last run (`final_step`), or does it
        itself when the holder is gone. A stop signal's `drain` bounds the last run: one cut
        short (its Spark work may still commit) leaves the lease to expire, not released."""
        if not self.is_holder and final:
            await self._final_without_the_lease()
        elif self.is_holder:
            last = self._run_once(final=True)
            await (
                last if drain is None else drain.within(f"the {self.job.name} job's last run", last)
            )
        await self._release()

    async def _final_without_the_lease(self) -> None:
        wait_s = final_wait_s(expiry_s=self._timings.expiry_s, every_s=self.job.every_s)
        deadline = self._clock.monotonic() + wait_s
        runs, row = HolderRuns(), None
        while True:
            try:
                row = await self._store.get(self.token)
                expired = (
                    row is not None
                    and self._tracker.observe([row], self._clock.monotonic())[0].is_expired
                )
                covered = runs.covered(row)
                step = final_step(row, me=self._me, is_expired=expired, covered=covered)
                if step is FinalStep.TAKE:
                    await self._try_take(force=True)
                    if self.is_holder:
                        await self._run_once(final=True)
                        return
            except LeaseError as e:
                self.log.warning("job.read_failed", error=str(e))
                step = FinalStep.WAIT
            if step is FinalStep.SKIP:
                self.log.info("job.final_done_by_holder", holder_left=not covered)
                return
            if self._clock.monotonic() >= deadline:  # a live holder whose runs fail: run it
                self.log.warning("job.final_wait_over", waited_s=wait_s)
                self._continuation = row.continuation if row is not None else None
                await self._run_once(final=True)
                return
            await asyncio.sleep(FINAL_POLL_S)

    async def _release(self) -> None:
        held = self._held
        if held is None or held.is_lost:
            return
        if self._run_unfinished:  # released, another host's run could overlap it
            self.log.warning("job.left_to_expire", epoch=held.epoch)
            return
        try:
            await let_go(held, self._store, timeout_s=self._timings.request_timeout_s * 3)
            self.log.info("job.released", epoch=held.epoch)
        except (LeaseError, TimeoutError) as e:
            self.log.warning("job.release_failed", error=str(e))

    def _lost(self) -> list[asyncio.Event]:
        return [self._held.lost] if self._held is not None else []

    async def _try_take(self, *, force: bool = False) -> None:
        """Take the lease if it is free, ours from before, or expired (`force`: already
        judged so by the caller)."""
        got, row = await take_job_lease(
            self._store,
            self.token,
            self._me,
            tracker=self._tracker,
            now=self._clock.monotonic(),
            force=force,
        )
        if got is None:
            return
        self._held = HeldLease(got, clock=self._clock, fence_after_s=self._timings.fence_after_s)
        self._first_run_at = self._clock.monotonic() + first_run_after_s(self.job)
        self._continuation = got.continuation
        self.log.info(
            "job.acquired",
            epoch=got.epoch,
            was=row.owner if row is not None else None,
            look=self.looks,
        )

    async def _run_once(self, *, final: bool) -> None:
        started = self._clock.monotonic()
        self._run_unfinished = True  # stays so when cancelled: its thread may still commit
        try:
            result = await self.job.run(self._continuation, final=final)
        except Exception as e:  # the job's own failure: logged, tried again next time
            self._run_unfinished = False
            self._progress.ran(self.job.name, ok=False)
            self.log.error("job.failed", error=f"{type(e).__name__}: {e}"[:2000], final=final)
            return
        self._run_unfinished = False
        self.runs += 1
        self._progress.ran(self.job.name, ok=True)
        self._continuation = result.continuation
        self.log.info(
            "job.ran",
            final=final,
            caught_up=result.is_caught_up,
            seconds=round(self._clock.monotonic() - started, 3),
            **result.summary,
        )
        await self._checkpoint(result)

    async def _checkpoint(self, result: JobRun) -> None:
        held = self._held
        if held is None or not held.is_usable():
            return
        try:
            written = await held.write(
                lambda lease: self._store.checkpoint(
                    lease,
                    result.continuation,
                    caught_up=result.is_caught_up,
                    when=self._clock.wall(),
                )
            )
        except LeaseError as e:
            self.log.warning("job.checkpoint_failed", error=str(e))
            return
        if written is None:
            self.log.warning("job.lost", epoch=held.epoch)
