"""One host process: the renewer, the balancer and the workers of the leases it owns.

```
Host.run                  TaskGroup: a crash here stops the host (its container restarts it)
├── Renewer.run           renews held leases at a fixed rate; fences what it cannot renew
├── Balancer.run          list, observe, plan, acquire or ask for hand-over, start workers
├── FeedWatcher.run       one look at segments.json per poll interval; wakes caught-up workers
├── sample_lag            bytes left per owned lease, for /status and /metrics
├── JobRunner.run         per singleton job of the observer (Spark's state job): run it while
│                         holding its lease
└── WorkerSupervisor.run  one task per owned lease: read, deliver, checkpoint, release
```

The host's state (`Lifecycle`: starting, running, paused, failed, draining, stopped, failed
permanently) follows from these loops: running after the first balancing tick (paused while the
processor row says so), failed while the lease store has not answered for a whole expiry, failed
permanently when `run` raises. `Presence` writes it to the host's row for `cfp status`.

Shutdown (`stop()`, SIGTERM, SIGINT, or caught up with `--until-caught-up`): balancing stops,
each worker finishes the batch in hand, checkpoints, closes its observer and releases its lease
(continuation kept); then each job runner lets go of its job's lease (after one final run with
`--until-caught-up`); the renewer keeps renewing until all that is done. Then the host returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import structlog

from leases import Lease, LeaseStore
from observers import (
    CloseReason,
    ObserverFactory,
    needs_segment_order,
    singleton_jobs,
)
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.storage import FeedStorage
from processor.clock import Clock, SystemClock
from processor.host.balancer import Balancer
from processor.host.config import HostConfig
from processor.host.dead_letter import DeadLetterFolder
from processor.host.feed_watcher import CATALOG_AGE_POLLS, FeedWatcher
from processor.host.jobs import JobRunner
from processor.host.lag import LAG_SAMPLE_S, sample_lag
from processor.host.lease_creation import LeaseCreator
from processor.host.lifecycle import HostState, Lifecycle
from processor.host.owner_writes import HeldLease
from processor.host.presence import Presence
from processor.host.progress import HostProgress
from processor.host.renewer import Renewer
from processor.host.supervisor import WorkerSupervisor
from processor.host.worker import ReaderFactory, run_worker
from processor.host.worker_env import WorkerEnv
from processor.reading.barrier_book import PositionBook
from processor.reading.lease_position import LeasePosition
from processor.waiting import running_event, wait_any

log = structlog.get_logger("cfp.host")


class Host:
    def __init__(
        self,
        config: HostConfig,
        *,
        store: LeaseStore,
        storage: FeedStorage,
        observer_factory: ObserverFactory,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        lifecycle: Lifecycle | None = None,
        progress: HostProgress | None = None,
        make_reader: ReaderFactory | None = None,  # tests: scripted shards
    ) -> None:
        self.config = config
        self._make_reader = make_reader
        self.clock = clock or SystemClock()
        self.progress = progress or HostProgress(
            wall=self.clock.wall, stuck_after_s=config.stuck_after_s
        )
        self.lifecycle = lifecycle or host_lifecycle(self.clock, self.progress)
        self.last_tick_at: float | None = None  # monotonic; the balancing loop is alive
        self._store_ok_at = self.clock.monotonic()
        self._stop = asyncio.Event()
        caught_up = asyncio.Event()
        running = running_event()  # shared by the balancer (sets it) and the workers
        t = config.timings
        self.store = store
        self.catalog = FeedCatalog(
            storage, refresh_s=t.poll_s * CATALOG_AGE_POLLS, clock=self.clock
        )
        self.watcher = FeedWatcher(self.catalog, every_s=t.poll_s)
        self.book = PositionBook(store.list_leases, refresh_s=t.barrier_refresh_s, clock=self.clock)
        self.env = self._worker_env(observer_factory, caught_up, running)
        self.supervisor = WorkerSupervisor(
            self._work, clock=self.clock, fence_after_s=t.fence_after_s
        )
        self.balancer = self._balancer(caught_up, running, rng)
        self.presence = Presence(
            store,
            name=config.host_name,
            lifecycle=self.lifecycle,
            progress=self.progress,
            clock=self.clock,
            expiry_s=t.expiry_s,
        )
        self.jobs = [
            JobRunner(
                job,
                store=store,
                me=config.host_name,
                timings=t,
                clock=self.clock,
                progress=self.progress,
                rng=rng,
            )
            for job in singleton_jobs(observer_factory)
        ]
        self.renewer = Renewer(
            store,
            self._held,
            every_s=t.renew_every_s,
            clock=self.clock,
            bytes_read=self.progress.read_so_far,
        )

    def _worker_env(
        self, factory: ObserverFactory, caught_up: asyncio.Event, running: asyncio.Event
    ) -> WorkerEnv:
        config = self.config
        return WorkerEnv(
            store=self.store,
            catalog=self.catalog,
            book=self.book,
            observer_factory=factory,
            host=config.host_name,
            processor=config.processor_name,
            timings=config.timings,
            clock=self.clock,
            stop=self._stop,
            batch_events=config.batch_events,
            # an observer that orders by sequencer itself (Spark) does not need the barrier
            is_ordered=config.is_ordered and needs_segment_order(factory),
            observer_spec=config.observer.spec,
            caught_up=caught_up if config.until_caught_up else None,
            on_observer_error=config.on_observer_error,
            on_gap=config.on_gap,
            observer_attempts=config.observer_attempts,
            dead_letters=(
                DeadLetterFolder(config.dead_letter_dir) if config.dead_letter_dir else None
            ),
            progress=self.progress,
            running=running,
            change=config.change,
            feed_changed=self.watcher.changed,
        )

    def _balancer(
        self, caught_up: asyncio.Event, running: asyncio.Event, rng: random.Random | None
    ) -> Balancer:
        config = self.config
        start, end = config.start_time, config.end_time
        creator = LeaseCreator(
            self.store,
            self.catalog,
            self.clock,
            initial_continuation=None
            if start is None and end is None
            else LeasePosition(start_time=start, end_time=end).to_json(),
            scan_partitions=config.scan_partitions if config.initial_scan else 0,
        )
        return Balancer(
            self.store,
            self.catalog,
            self.supervisor,
            self.book,
            me=config.host_name,
            timings=config.timings,
            clock=self.clock,
            creator=creator,
            rng=rng or random.Random(),
            on_caught_up=self.stop if config.until_caught_up else None,
            caught_up=caught_up,
            progress=self.progress,
            on_tick=self._after_tick,
            running=running,
            by_load=config.by_load,
        )

    def _held(self) -> list[HeldLease]:
        """Every lease this host holds: its workers' and its jobs'."""
        return [*self.supervisor.held(), *(held for job in self.jobs for held in job.held())]

    def stop(self) -> None:
        """Begin a graceful shutdown; calling it again does nothing more."""
        self._stop.set()

    @property
    def ready(self) -> asyncio.Event:
        """Set after the first successful balancing tick (listed, created, planned)."""
        return self.balancer.ready

    def _after_tick(self, store_error: str | None) -> None:
        """Health from the balancing loop: running while the lease store answers; failed once
        it has not answered for a whole lease expiry (every lease is fenced by then)."""
        now = self.clock.monotonic()
        self.last_tick_at = now
        self._store_ok_at, failure = store_health(
            now=now,
            ok_at=self._store_ok_at,
            answered_at=self.balancer.store_answered_at,
            store_error=store_error,
            expiry_s=self.config.timings.expiry_s,
        )
        self.presence.note = self.balancer.idle_because
        if failure is not None:
            self.lifecycle.move(HostState.FAILED, error=failure)
        elif store_error is None and self.ready.is_set():
            self.lifecycle.move(HostState.PAUSED if self.balancer.paused else HostState.RUNNING)

    def store_silent_s(self) -> float:
        """Seconds since the lease store last answered a balancing tick."""
        return self.clock.monotonic() - self._store_ok_at

    def loop_age_s(self) -> float | None:
        """Seconds since the balancing loop last went round (None: not yet)."""
        at = self.last_tick_at
        return None if at is None else self.clock.monotonic() - at

    def parked(self) -> list[Lease]:
        """The leases parked on bad data or a failing observer, as of the last tick."""
        return list(self.balancer.parked)

    async def _work(self, held: HeldLease) -> CloseReason:
        return await run_worker(held, self.env, make_reader=self._make_reader)

    async def run(self, stop: asyncio.Event | None = None, *, endpoint: str = "") -> None:
        """Run until stopped; `endpoint`: where this host's HTTP endpoints listen, for its row.
        Errors: lease-store or feed failures that are not transient."""
        with structlog.contextvars.bound_contextvars(
            host=self.config.host_name, processor=self.config.processor_name
        ):
            self.lifecycle.move(HostState.STARTING)
            presence_stop = asyncio.Event()
            t = self.config.timings
            publishing = asyncio.create_task(
                self.presence.run(presence_stop, every_s=t.acquire_every_s, endpoint=endpoint)
            )
            try:
                async with contextlib.AsyncExitStack() as stack:
                    if await self._open_observers(stack, stop):
                        await self._run(stop)
            except BaseException as e:
                self.lifecycle.move(HostState.FAILED_PERMANENTLY, error=_describe(e))
                raise
            else:
                self.lifecycle.move(HostState.STOPPED)
            finally:
                presence_stop.set()
                await asyncio.gather(publishing, return_exceptions=True)
                await self.presence.finish(timeout_s=t.request_timeout_s)

    async def _open_observers(
        self, stack: contextlib.AsyncExitStack, stop: asyncio.Event | None
    ) -> bool:
        """Enter the observer factory's context (e.g. one Spark session for every lease) unless
        the host is stopped first: False then. Nothing is held yet, so a host told to stop while
        its Spark session opens (tens of seconds) exits at once instead of finishing the open."""
        factory: Any = self.env.observer_factory
        if not hasattr(factory, "__aenter__"):
            return True
        self.presence.note = f"opening its observer ({self.config.observer.spec}) first"
        await self.presence.publish()
        opening = asyncio.ensure_future(stack.enter_async_context(factory))
        stopped = asyncio.ensure_future(wait_any(*self._stop_events(stop), timeout_s=None))
        try:
            await asyncio.wait([opening, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not opening.done():
                opening.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await opening
        if not opening.cancelled():
            opening.result()  # raises what the opening raised
            return True
        self.lifecycle.move(HostState.DRAINING)  # nothing to drain: stopped next
        log.info("host.stopped_while_starting")
        return False

    def _stop_events(self, stop: asyncio.Event | None) -> list[asyncio.Event]:
        return [self._stop, *([stop] if stop is not None else [])]

    async def _run(self, stop: asyncio.Event | None) -> None:
        log.info("host.starting")
        renewer_stop = asyncio.Event()
        async with asyncio.TaskGroup() as tg:
            supervising = tg.create_task(self.supervisor.run())
            tg.create_task(self.renewer.run(renewer_stop))
            balancing = tg.create_task(self.balancer.run(self._stop))
            tg.create_task(self.watcher.run(self._stop))
            jobs = [tg.create_task(job.run(self._stop)) for job in self.jobs]
            tg.create_task(
                sample_lag(
                    self.progress,
                    self.catalog,
                    self._stop,
                    every_s=min(LAG_SAMPLE_S, self.config.timings.acquire_every_s),
                )
            )
            await wait_any(*self._stop_events(stop), timeout_s=None)
            self.stop()
            self.lifecycle.move(HostState.DRAINING)
            log.info("host.draining", leases=len(self.supervisor.tokens()))
            await balancing
            self.supervisor.close()
            await supervising  # every worker has checkpointed, closed and released
            await asyncio.gather(*jobs)
            for job in self.jobs:
                await job.finish(final=self.config.until_caught_up)
            renewer_stop.set()
        log.info("host.stopped", closed=self._reasons())

    def _reasons(self) -> dict[str, int]:
        return {r.value: n for r, n in self.supervisor.closed_reasons.items()}


def store_health(
    *,
    now: float,
    ok_at: float,
    answered_at: float | None,
    store_error: str | None,
    expiry_s: float,
) -> tuple[float, str | None]:
    """After a balancing tick: when the lease store last answered, and why the host has failed
    (None: it has not). The store's answer is its listing's time, not the tick's end: a tick
    that then waited on a failing feed says nothing of the store since. Failed once the store
    has been silent for a whole expiry (every lease is fenced by then)."""
    if store_error is None and answered_at is not None:
        ok_at = max(ok_at, answered_at)
    silent = now - ok_at
    if silent < expiry_s:
        return ok_at, None
    return ok_at, store_error or f"the lease store has not answered for {silent:.1f} s"


def host_lifecycle(clock: Clock, progress: HostProgress) -> Lifecycle:
    """A lifecycle whose every move is logged and shown in the `cfp_host_state` metric."""
    lifecycle = Lifecycle(clock=clock.monotonic, since=clock.monotonic())

    def changed(state: HostState) -> None:
        progress.state.state(state.value)
        log.info("host.state", state=state.value, error=lifecycle.error or None)

    lifecycle.listeners.append(changed)
    return lifecycle


def _describe(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(_describe(x) for x in e.exceptions)
    if isinstance(e, asyncio.CancelledError):
        return "cancelled"
    return f"{type(e).__name__}: {e}"
