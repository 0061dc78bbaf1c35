"""One host from its config: every part made once, in one place, with what it needs injected;
nothing is changed after construction. `cfp run` (cli/serve.py) only opens it, serves its
health, and runs it; tests build hosts over in-memory stores with `build_host`."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, replace

import structlog

from leases import LeaseStore, TableLeaseStore
from observers import (
    CloseReason,
    ObserverFactory,
    load_observer_factory,
    needs_segment_order,
    singleton_jobs,
)
from processor import connection
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.storage import FeedStorage
from processor.clock import Clock, SystemClock
from processor.host.balancer import Balancer
from processor.host.config import HostConfig
from processor.host.dead_letter import DeadLetterFolder
from processor.host.endpoints import HostHealth
from processor.host.feed_watcher import CATALOG_AGE_POLLS, FeedWatcher
from processor.host.host import Host, HostParts
from processor.host.jobs import JobRunner
from processor.host.lease_creation import LeaseCreator
from processor.host.owner_writes import HeldLease
from processor.host.presence import Presence
from processor.host.progress import HostProgress
from processor.host.renewer import Renewer
from processor.host.supervisor import WorkerSupervisor
from processor.host.tick_watch import TickWatch, host_lifecycle
from processor.host.worker import ReaderFactory, run_worker
from processor.host.worker_env import WorkerDeps, WorkerEnv, WorkerPolicy, WorkerSignals
from processor.reading.barrier_book import PositionBook
from processor.reading.identity import claim_identity
from processor.reading.lease_position import LeasePosition
from processor.waiting import running_event

# /healthz fails when no balancing tick completed for this long (ticks, at least this many s)
STALL_AFTER_TICKS = 10
STALL_AFTER_MIN_S = 120.0

log = structlog.get_logger("cfp.host")


@dataclass(frozen=True, slots=True)
class AssembledHost:
    """A host and what serves it: its health for the endpoints, and the two clients it owns
    (closed by `close`)."""

    config: HostConfig
    host: Host
    health: HostHealth
    store: TableLeaseStore
    storage: FeedStorage

    async def open(self) -> None:
        """Open the lease table and claim the processor's identity (the first host writes it;
        every other checks it delivers the same). Errors: `IdentityMismatch` (a `FilterError`),
        `LeaseError`."""
        placement = self.config.placement
        await self.store.open()
        await claim_identity(
            self.store,
            self.config.reading.identity,
            processor=placement.processor_name,
            table=placement.lease_table,
            lease_partitions=placement.lease_partitions,
        )
        if (fixed := await self.store.lease_partitions()) != placement.lease_partitions:
            log.info("lease_partitions.fixed", partitions=fixed, asked=placement.lease_partitions)

    async def close(self) -> None:
        await self.store.close()
        await self.storage.close()


def assemble(config: HostConfig, clock: Clock) -> AssembledHost:
    """Every part of a host (no request is sent yet). Errors: `PluginLoadError` for an observer
    that cannot be loaded."""
    t, placement = config.timings, config.placement
    store = connection.lease_store(
        placement.lease_connection_string,
        table=placement.lease_table,
        processor=placement.processor_name,
        request_timeout_s=t.request_timeout_s,
    )
    storage = FeedStorage.from_connection_string(placement.connection_string)
    progress = HostProgress(
        wall=clock.wall,
        stuck_after_s=config.delivery.stuck_after_s,
        storage_requests=storage.requests.by_kind,
        lease_requests=store.requests,
        lease_rows_listed=lambda: store.rows_listed,
    )
    factory = load_observer_factory(config.delivery.observer, host_name=placement.host_name)
    host = build_host(
        config, store=store, storage=storage, observer_factory=factory, clock=clock,
        progress=progress,
    )  # fmt: skip
    health = HostHealth(
        host_name=placement.host_name,
        processor=placement.processor_name,
        lifecycle=host.lifecycle,
        progress=progress,
        expiry_s=t.expiry_s,
        stall_after_s=max(STALL_AFTER_MIN_S, STALL_AFTER_TICKS * t.acquire_every_s),
        loop_age_s=host.ticks.loop_age_s,
        store_silent_s=host.ticks.store_silent_s,
        extra={"leaseTable": placement.lease_table, "observer": config.delivery.observer.spec},
    )
    return AssembledHost(config, host, health, store, storage)


def build_host(
    config: HostConfig,
    *,
    store: LeaseStore,
    storage: FeedStorage,
    observer_factory: ObserverFactory,
    clock: Clock | None = None,
    progress: HostProgress | None = None,
    rng: random.Random | None = None,
    make_reader: ReaderFactory | None = None,  # tests: scripted shards
) -> Host:
    """The host's parts over `store` and `storage`, wired to each other."""
    clock = clock or SystemClock()
    progress = progress or HostProgress(
        wall=clock.wall, stuck_after_s=config.delivery.stuck_after_s
    )
    t, me = config.timings, config.placement.host_name
    lifecycle = host_lifecycle(clock, progress)
    catalog = FeedCatalog(storage, refresh_s=t.poll_s * CATALOG_AGE_POLLS, clock=clock)
    watcher = FeedWatcher(catalog, every_s=t.poll_s)
    env = _worker_env(
        config, store, catalog, watcher=watcher, factory=observer_factory, clock=clock,
        progress=progress,
    )  # fmt: skip

    async def work(held: HeldLease) -> CloseReason:
        return await run_worker(held, env, make_reader=make_reader)

    supervisor = WorkerSupervisor(work, clock=clock, fence_after_s=t.fence_after_s)
    presence = Presence(
        store, name=me, lifecycle=lifecycle, leases=progress.leases, clock=clock,
        expiry_s=t.expiry_s,
    )  # fmt: skip
    ticks = TickWatch(lifecycle, presence, clock, expiry_s=t.expiry_s)
    balancer = _balancer(config, store, env, supervisor, ticks=ticks, rng=rng, progress=progress)
    jobs = [
        JobRunner(job, store=store, me=me, timings=t, clock=clock, progress=progress.jobs, rng=rng)
        for job in singleton_jobs(observer_factory)
    ]

    def held() -> list[HeldLease]:
        """Every lease this host holds: its workers' and its jobs'."""
        return [*supervisor.held(), *(lease for job in jobs for lease in job.held())]

    renewer = Renewer(
        store, held, every_s=t.renew_every_s, clock=clock, bytes_read=progress.leases.read_so_far
    )
    return Host(
        HostParts(
            config, clock, lifecycle, progress, observer_factory, catalog, watcher, supervisor,
            balancer, ticks, presence, jobs, renewer, stop=env.signals.stop,
        )
    )  # fmt: skip


def _worker_env(
    config: HostConfig,
    store: LeaseStore,
    catalog: FeedCatalog,
    *,
    watcher: FeedWatcher,
    factory: ObserverFactory,
    clock: Clock,
    progress: HostProgress,
) -> WorkerEnv:
    book = PositionBook(store.list_leases, refresh_s=config.timings.barrier_refresh_s, clock=clock)
    signals = WorkerSignals(
        stop=asyncio.Event(),
        running=running_event(),  # the balancer clears it while the processor is paused
        caught_up=asyncio.Event() if config.until_caught_up else None,
        feed_changed=watcher.changed,
    )
    deps = WorkerDeps(
        store, catalog, book, factory, clock, progress.leases, dead_letters=_dead_letters(config)
    )
    return WorkerEnv(deps, _worker_policy(config, factory), signals)


def _worker_policy(config: HostConfig, factory: ObserverFactory) -> WorkerPolicy:
    # an observer that orders by sequencer itself (Spark) does not need the barrier
    ordered = config.reading.is_ordered and needs_segment_order(factory)
    return WorkerPolicy(
        host=config.placement.host_name,
        processor=config.placement.processor_name,
        timings=config.timings,
        reading=replace(config.reading, is_ordered=ordered),
        delivery=config.delivery,
    )


def _dead_letters(config: HostConfig) -> DeadLetterFolder | None:
    folder = config.delivery.dead_letter_dir
    return DeadLetterFolder(folder) if folder else None


def _balancer(
    config: HostConfig,
    store: LeaseStore,
    env: WorkerEnv,
    supervisor: WorkerSupervisor,
    *,
    ticks: TickWatch,
    rng: random.Random | None,
    progress: HostProgress,
) -> Balancer:
    deps, signals = env.deps, env.signals
    start, end = config.new_leases.start_time, config.reading.end_time
    creator = LeaseCreator(
        store,
        deps.catalog,
        deps.clock,
        initial_continuation=None
        if start is None and end is None
        else LeasePosition(start_time=start, end_time=end).to_json(),
        scan_partitions=config.new_leases.scan_partitions if config.new_leases.initial_scan else 0,
    )
    return Balancer(
        store,
        deps.catalog,
        supervisor,
        deps.book,
        me=config.placement.host_name,
        timings=config.timings,
        clock=deps.clock,
        creator=creator,
        rng=rng or random.Random(),
        on_caught_up=signals.stop.set if config.until_caught_up else None,
        caught_up=signals.caught_up,
        progress=progress.balancing,
        on_tick=ticks,
        running=signals.running,
        by_load=config.by_load,
    )
