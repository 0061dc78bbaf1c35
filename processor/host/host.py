"""One host process: the renewer, the balancer and the workers of the leases it owns.

```
Host.run                  TaskGroup: a crash here stops the host (its container restarts it)
├── Renewer.run           renews held leases at a fixed rate; fences what it cannot renew
├── Balancer.run          list, observe, plan, acquire or ask for hand-over, start workers
├── FeedWatcher.run       one look at segments.json per poll interval; wakes caught-up workers
├── sample_lag            bytes left per owned lease, for /status and /metrics
├── JobRunner.run         per singleton job of the observer (Spark's state job): run it while
│                         holding its lease
├── HintRunner.run        with --hints-queue: the queue's hints into an observer of their own
└── WorkerSupervisor.run  one task per owned lease: read, deliver, checkpoint, release
```

The host's state (`Lifecycle`: starting, running, paused, failed, draining, stopped, failed
permanently) follows from these loops: running after the first balancing tick (paused while the
processor row says so), failed while the lease store has not answered for a whole expiry, failed
permanently when `run` raises. `Presence` writes it to the host's row for `cfp status`.

Shutdown (`stop()`, SIGTERM, SIGINT, or caught up with `--until-caught-up`): balancing stops,
each worker finishes the batch in hand, checkpoints, closes its observer and releases its lease
(continuation kept); the hints' reader stops receiving and settles what it holds; then each
job runner lets go of its job's lease (after one final run with
`--until-caught-up`); the renewer keeps renewing until all that is done. Then the host returns.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import structlog

from leases import Lease
from observers import EnteredOncePerHost, sink_health
from processor.host.balancing.balancer import Balancer
from processor.host.balancing.tick_watch import TickWatch
from processor.host.health.endpoints import HostHealth
from processor.host.health.host_progress import HostProgress
from processor.host.health.lag_sampling import LAG_SAMPLE_S, sample_lag
from processor.host.health.lifecycle import HostState, Lifecycle
from processor.host.health.presence import Presence
from processor.host.host_config import HostConfig
from processor.host.leasing.renewer import Renewer
from processor.host.running.drain_budget import DrainBudget
from processor.host.running.hint_runner import HintRunner
from processor.host.running.job_runner import JobRunner
from processor.host.running.worker_supervisor import WorkerSupervisor
from processor.host.worker.feed_watcher import FeedWatcher
from processor.host.worker.worker_env import WorkerEnv
from processor.waiting import wait_any

log = structlog.get_logger("cfp.host")

# /healthz fails when no balancing tick completed for this long (ticks, at least this many s)
STALL_AFTER_TICKS = 10
STALL_AFTER_MIN_S = 120.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HostParts:
    """Every part of a host, made and wired by `processor.host.assembly`."""

    config: HostConfig
    env: WorkerEnv  # the services, policy and signals every worker shares
    lifecycle: Lifecycle
    progress: HostProgress
    watcher: FeedWatcher
    supervisor: WorkerSupervisor
    balancer: Balancer
    ticks: TickWatch
    presence: Presence
    jobs: list[JobRunner]
    renewer: Renewer
    hints: HintRunner | None = None  # --hints-queue


class Host:
    def __init__(self, parts: HostParts) -> None:
        deps, signals = parts.env.deps, parts.env.signals
        self.config = parts.config
        self.clock = deps.clock
        self.lifecycle = parts.lifecycle
        self.progress = parts.progress
        self.catalog = deps.catalog
        self.watcher = parts.watcher
        self.supervisor = parts.supervisor
        self.balancer = parts.balancer
        self.ticks = parts.ticks
        self.presence = parts.presence
        self.jobs = parts.jobs
        self.renewer = parts.renewer
        self.hints = parts.hints
        self._observer_factory = deps.observer_factory
        self._stop = signals.stop  # set to drain: balancing stops, workers finish
        self.drain = signals.drain  # what a stop signal still waits for, how long

    def stop(self) -> None:
        """Begin a graceful shutdown; calling it again does nothing more."""
        self._stop.set()

    def health(self) -> HostHealth:
        """What the host's endpoints answer from (/healthz, /readyz, /metrics, /status)."""
        config, t = self.config, self.config.timings
        return HostHealth(
            host_name=config.placement.host_name,
            processor=config.placement.processor_name,
            lifecycle=self.lifecycle,
            progress=self.progress,
            expiry_s=t.expiry_s,
            stall_after_s=max(STALL_AFTER_MIN_S, STALL_AFTER_TICKS * t.acquire_every_s),
            loop_age_s=self.ticks.loop_age_s,
            store_silent_s=self.ticks.store_silent_s,
            sink=lambda: sink_health(self._observer_factory),
            extra={
                "leaseTable": config.placement.lease_table,
                "observer": config.delivery.observer.spec,
            },
        )

    @property
    def ready(self) -> asyncio.Event:
        """Set after the first successful balancing tick (listed, created, planned)."""
        return self.ticks.ready

    def parked(self) -> list[Lease]:
        """The leases parked on bad data or a failing observer, as of the last tick."""
        return list(self.ticks.parked)

    async def run(self, stop: asyncio.Event | None = None, *, endpoint: str = "") -> None:
        """Run until stopped; `endpoint`: where this host's HTTP endpoints listen, for its row.
        Errors: lease-store or feed failures that are not transient."""
        with structlog.contextvars.bound_contextvars(
            host=self.config.placement.host_name, processor=self.config.placement.processor_name
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
        factory = self._observer_factory
        if not isinstance(factory, EnteredOncePerHost):
            return True
        self.presence.note = f"opening its observer ({self.config.delivery.observer.spec}) first"
        await self.presence.publish()
        opening = asyncio.ensure_future(stack.enter_async_context(Bounded(factory, self.drain)))
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
            hinting = tg.create_task(self.hints.run(self._stop)) if self.hints else None
            tg.create_task(
                sample_lag(
                    self.progress.leases,
                    self.catalog,
                    self._stop,
                    every_s=min(LAG_SAMPLE_S, self.config.timings.acquire_every_s),
                )
            )
            await wait_any(*self._stop_events(stop), timeout_s=None)
            if stop is not None and stop.is_set():  # told to stop: the drain has a budget
                self.drain.begin()
            self.stop()
            self.lifecycle.move(HostState.DRAINING)
            log.info("host.draining", leases=len(self.supervisor.tokens()))
            await balancing
            self.supervisor.close()
            await supervising  # every worker has checkpointed, closed (or was cut) and released
            if hinting is not None:  # what it holds and has not settled comes back to another
                await self.drain.within("the hints", hinting)
            await self.drain.within("the jobs' runs", asyncio.gather(*jobs))
            for job in self.jobs:
                await job.finish(final=self.config.until_caught_up, drain=self.drain)
            renewer_stop.set()
        log.info("host.stopped", closed=self._reasons())

    def _reasons(self) -> dict[str, int]:
        return {r.value: n for r, n in self.supervisor.closed_reasons.items()}


class Bounded:
    """The observer factory's context, its exit (the Spark sink's last writes) within the
    drain's budget."""

    def __init__(self, factory: Any, drain: DrainBudget) -> None:
        self.factory, self.drain = factory, drain

    async def __aenter__(self) -> Any:
        return await self.factory.__aenter__()

    async def __aexit__(self, *exc: Any) -> None:
        await self.drain.within("the observer's exit", self.factory.__aexit__(*exc))


def _describe(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(_describe(x) for x in e.exceptions)
    if isinstance(e, asyncio.CancelledError):
        return "cancelled"
    return f"{type(e).__name__}: {e}"
