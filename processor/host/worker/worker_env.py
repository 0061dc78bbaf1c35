"""What every worker of a host is given, in three parts: the services it uses, the policy the
host's settings set, and the signals it waits on (made once per host by `WorkerEnv.for_host`);
and the one way a worker's run ends (`WorkerEnded`). A worker hands each of its parts only the
collaborators that part uses (`checkpointer_for`, `delivery_for`), never the environment."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace

from leases import HostId, LeaseTable
from leases.policy.timings import Timings
from observers import CloseReason, ObserverFactory, needs_segment_order
from processor.changefeed.catalog import FeedCatalog
from processor.clock import Clock
from processor.host.health.lease_recorder import LeaseRecorder
from processor.host.host_config import DEFAULT_DRAIN_S, DeliveryPolicy, HostConfig, Reading
from processor.host.running.drain_budget import DrainBudget
from processor.host.worker.dead_letter_folder import DeadLetterFolder
from processor.plugins.observer_calls import ObserverCalls
from processor.reading.position_book import PositionBook
from processor.waiting import running_event


@dataclass(frozen=True, slots=True)
class WorkerDeps:
    """The services every worker of the host shares."""

    store: LeaseTable
    catalog: FeedCatalog
    book: PositionBook  # every lease's position, for the segment barrier
    observer_factory: ObserverFactory
    clock: Clock
    progress: LeaseRecorder  # for /status and /metrics
    dead_letters: DeadLetterFolder | None = None  # with OnObserverError.DEAD_LETTER
    observer_pool: Executor | None = None  # plain observer methods' threads (None: the default)


@dataclass(frozen=True, slots=True)
class HostServices:
    """What a host makes once for its workers (`WorkerEnv.for_host` makes their `WorkerDeps`
    of it): the lease table, the feed, the observer factory, the clock, the per-lease
    counters, the observer pool, and the dead-letter folder (None: none)."""

    store: LeaseTable
    catalog: FeedCatalog
    factory: ObserverFactory
    clock: Clock
    leases: LeaseRecorder
    observer_pool: Executor | None = None
    dead_letter_dir: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerPolicy:
    """Who the worker works as, and the host's settings it follows (shared, never copied)."""

    host: HostId
    processor: str
    timings: Timings
    reading: Reading
    delivery: DeliveryPolicy


@dataclass(frozen=True, slots=True)
class WorkerSignals:
    """What a worker waits on or sets, shared with the host and its balancer."""

    stop: asyncio.Event  # the host is draining
    running: asyncio.Event = field(default_factory=running_event)  # cleared: processor paused
    caught_up: asyncio.Event | None = None  # set when a lease records it is caught up
    # the host's feed watcher: a lease caught up at a segment's end waits for it, not polling
    feed_changed: Callable[[], asyncio.Event] | None = None
    # how long the observers' closes may still take once a stop signal came
    drain: DrainBudget = field(default_factory=lambda: DrainBudget(DEFAULT_DRAIN_S, time.monotonic))


@dataclass(frozen=True, slots=True)
class WorkerEnv:
    deps: WorkerDeps
    policy: WorkerPolicy
    signals: WorkerSignals

    def new_observer(self) -> ObserverCalls:
        """One lease's observer from the host's factory, its plain methods run in the host's
        observer pool."""
        deps, choice = self.deps, self.policy.delivery.observer
        return ObserverCalls(deps.observer_factory(), spec=choice.spec, pool=deps.observer_pool)

    @classmethod
    def for_host(
        cls,
        config: HostConfig,
        services: HostServices,
        *,
        feed_changed: Callable[[], asyncio.Event],
    ) -> WorkerEnv:
        """What every worker of the host `config` describes shares."""
        t, placement, s = config.timings, config.placement, services
        clock, factory, folder = s.clock, s.factory, s.dead_letter_dir
        book = PositionBook(s.store.list_leases, refresh_s=t.barrier_refresh_s, clock=clock)
        deps = WorkerDeps(
            s.store,
            s.catalog,
            book,
            factory,
            clock,
            s.leases,
            dead_letters=DeadLetterFolder(folder) if folder else None,
            observer_pool=s.observer_pool,
        )
        # an observer that orders by sequencer itself (Spark) does not need the barrier
        ordered = config.reading.is_ordered and needs_segment_order(factory)
        reading = replace(config.reading, is_ordered=ordered)
        policy = WorkerPolicy(
            placement.host_name, placement.processor_name, t, reading, config.delivery
        )
        signals = WorkerSignals(
            stop=asyncio.Event(),
            running=running_event(),  # the balancer clears it while the processor is paused
            caught_up=asyncio.Event() if config.until_caught_up else None,
            feed_changed=feed_changed,
            drain=DrainBudget(config.delivery.drain_s, clock.monotonic),
        )
        return cls(deps, policy, signals)


class WorkerEnded(Exception):
    """How a worker ends. `park`: the cause will not go away by retrying (bad data, a poison
    batch with `stop`), so the lease is parked instead of released."""

    def __init__(self, reason: CloseReason, error: str = "", *, park: bool = False) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.error = error
        self.park = park
