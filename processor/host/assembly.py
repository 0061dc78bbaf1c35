"""One host from its config: every part made once, in one place and in one pass, with what it
needs injected; nothing is changed after construction. `cfp run` (cli/serve.py) only opens it,
serves the host's health, and runs it; tests assemble hosts over in-memory clients."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import structlog

from leases import HostId, LeaseStore, TableLeaseStore
from observers import (
    CloseReason,
    ObserverChoice,
    ObserverFactory,
    load_observer_factory,
    needs_segment_order,
    singleton_jobs,
)
from processor import connection
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.storage import FeedStorage
from processor.clock import Clock
from processor.host.balancer import Balancer
from processor.host.config import HostConfig, Placement
from processor.host.dead_letter import DeadLetterFolder
from processor.host.feed_watcher import CATALOG_AGE_POLLS, FeedWatcher
from processor.host.host import Host, HostParts
from processor.host.jobs import JobRunner
from processor.host.lease_creation import LeaseCreator
from processor.host.lease_recorder import LeaseRecorder
from processor.host.lifecycle import Lifecycle, logged_lifecycle
from processor.host.owner_writes import HeldLease
from processor.host.presence import Presence
from processor.host.progress import BalancingRecorder, ClientCounts, HostProgress
from processor.host.renewer import Renewer
from processor.host.supervisor import WorkerSupervisor
from processor.host.tick_watch import TickWatch
from processor.host.worker import ReaderFactory, run_worker
from processor.host.worker_env import WorkerDeps, WorkerEnv, WorkerPolicy, WorkerSignals
from processor.reading.barrier_book import PositionBook
from processor.reading.identity import claim_identity
from processor.reading.lease_position import LeasePosition
from processor.waiting import running_event

log = structlog.get_logger("cfp.host")

ObserverLoader = Callable[[ObserverChoice, HostId], ObserverFactory]


@dataclass(frozen=True, slots=True)
class HostClients:
    """What a host talks through: the lease store and the feed's storage, and the counts they
    keep of their requests (for /metrics)."""

    store: LeaseStore
    storage: FeedStorage
    counts: ClientCounts = field(default_factory=ClientCounts)
    table: TableLeaseStore | None = None  # the store, when it is a real table to open and close

    @classmethod
    def of(cls, placement: Placement, request_timeout_s: float) -> HostClients:
        """The clients of the accounts `placement` names (no request is sent yet)."""
        table = connection.lease_store(
            placement.lease_connection_string,
            table=placement.lease_table,
            processor=placement.processor_name,
            request_timeout_s=request_timeout_s,
        )
        storage = FeedStorage.from_connection_string(placement.connection_string)
        counts = ClientCounts(storage.requests.by_kind, table.requests, lambda: table.rows_listed)
        return cls(table, storage, counts, table)


@dataclass(frozen=True, slots=True)
class AssembledHost:
    config: HostConfig
    host: Host
    clients: HostClients

    async def open(self) -> None:
        """Open the lease table and claim the processor's identity (the first host writes it;
        every other checks it delivers the same). Errors: `IdentityMismatch` (a `FilterError`),
        `LeaseError`."""
        placement, store = self.config.placement, self.clients.store
        if self.clients.table is not None:
            await self.clients.table.open()
        await claim_identity(
            store,
            self.config.reading.identity,
            processor=placement.processor_name,
            table=placement.lease_table,
            lease_partitions=placement.lease_partitions,
        )
        if (fixed := await store.lease_partitions()) != placement.lease_partitions:
            log.info("lease_partitions.fixed", partitions=fixed, asked=placement.lease_partitions)

    async def close(self) -> None:
        if self.clients.table is not None:
            await self.clients.table.close()
            await self.clients.storage.close()


def assemble(
    config: HostConfig,
    clock: Clock,
    *,
    clients: HostClients | None = None,  # tests: in memory
    load_observer: ObserverLoader = lambda choice, me: load_observer_factory(choice, host_name=me),
    make_reader: ReaderFactory | None = None,  # tests: scripted shards
) -> AssembledHost:
    """Every part of a host (no request is sent yet): the clients, the observer, the numbers
    and the lifecycle, the feed's catalog, the workers' environment, then the loops. Errors:
    `PluginLoadError` for an observer that cannot be loaded."""
    clients = clients or HostClients.of(config.placement, config.timings.request_timeout_s)
    factory = load_observer(config.delivery.observer, config.placement.host_name)
    progress = HostProgress(
        wall=clock.wall, stuck_after_s=config.delivery.stuck_after_s, clients=clients.counts
    )
    lifecycle = logged_lifecycle(clock.monotonic, progress.state.state)
    poll_s = config.timings.poll_s
    catalog = FeedCatalog(clients.storage, refresh_s=poll_s * CATALOG_AGE_POLLS, clock=clock)
    watcher = FeedWatcher(catalog, every_s=poll_s)
    store = clients.store
    env = _worker_env(
        config, store, catalog, watcher=watcher, factory=factory, clock=clock,
        leases=progress.leases,
    )  # fmt: skip
    parts = _host_parts(
        config, store, env, watcher=watcher, lifecycle=lifecycle, progress=progress,
        make_reader=make_reader,
    )  # fmt: skip
    return AssembledHost(config, Host(parts), clients)


def _worker_env(
    config: HostConfig,
    store: LeaseStore,
    catalog: FeedCatalog,
    *,
    watcher: FeedWatcher,
    factory: ObserverFactory,
    clock: Clock,
    leases: LeaseRecorder,
) -> WorkerEnv:
    """What every worker of the host shares: its services, its policy, its signals."""
    t, folder = config.timings, config.delivery.dead_letter_dir
    book = PositionBook(store.list_leases, refresh_s=t.barrier_refresh_s, clock=clock)
    deps = WorkerDeps(
        store,
        catalog,
        book,
        factory,
        clock,
        leases,
        dead_letters=DeadLetterFolder(folder) if folder else None,
    )
    # an observer that orders by sequencer itself (Spark) does not need the barrier
    ordered = config.reading.is_ordered and needs_segment_order(factory)
    reading = replace(config.reading, is_ordered=ordered)
    placement = config.placement
    policy = WorkerPolicy(
        placement.host_name, placement.processor_name, t, reading, config.delivery
    )
    signals = WorkerSignals(
        stop=asyncio.Event(),
        running=running_event(),  # the balancer clears it while the processor is paused
        caught_up=asyncio.Event() if config.until_caught_up else None,
        feed_changed=watcher.changed,
    )
    return WorkerEnv(deps, policy, signals)


def _host_parts(
    config: HostConfig,
    store: LeaseStore,
    env: WorkerEnv,
    *,
    watcher: FeedWatcher,
    lifecycle: Lifecycle,
    progress: HostProgress,
    make_reader: ReaderFactory | None,
) -> HostParts:
    """The host's loops over the workers' environment: supervisor, presence, balancer, jobs,
    renewer."""
    t, me, deps = config.timings, config.placement.host_name, env.deps

    async def work(held: HeldLease) -> CloseReason:
        return await run_worker(held, env, make_reader=make_reader)

    supervisor = WorkerSupervisor(work, clock=deps.clock, fence_after_s=t.fence_after_s)
    presence = Presence(
        store,
        name=me,
        lifecycle=lifecycle,
        leases=progress.leases,
        clock=deps.clock,
        expiry_s=t.expiry_s,
    )
    ticks = TickWatch(lifecycle, presence, deps.clock, expiry_s=t.expiry_s)
    balancer = _balancer(config, store, env, supervisor, ticks=ticks, counts=progress.balancing)
    jobs = [
        JobRunner(job, store=store, me=me, timings=t, clock=deps.clock, progress=progress.jobs)
        for job in singleton_jobs(deps.observer_factory)
    ]
    renewer = Renewer(
        store,
        lambda: [*supervisor.held(), *(held for job in jobs for held in job.held())],
        every_s=t.renew_every_s,
        clock=deps.clock,
        bytes_read=progress.leases.read_so_far,
    )
    return HostParts(
        config=config,
        clock=deps.clock,
        lifecycle=lifecycle,
        progress=progress,
        observer_factory=deps.observer_factory,
        catalog=deps.catalog,
        watcher=watcher,
        supervisor=supervisor,
        balancer=balancer,
        ticks=ticks,
        presence=presence,
        jobs=jobs,
        renewer=renewer,
        stop=env.signals.stop,
    )


def _balancer(
    config: HostConfig,
    store: LeaseStore,
    env: WorkerEnv,
    supervisor: WorkerSupervisor,
    *,
    ticks: TickWatch,
    counts: BalancingRecorder,
) -> Balancer:
    deps, new = env.deps, config.new_leases
    start, end = new.start_time, config.reading.end_time
    creator = LeaseCreator(
        store,
        deps.catalog,
        deps.clock,
        initial_continuation=None
        if start is None and end is None
        else LeasePosition(start_time=start, end_time=end).to_json(),
        scan_partitions=new.scan_partitions if new.initial_scan else 0,
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
        progress=counts,
        signals=env.signals,
        until_caught_up=config.until_caught_up,
        on_tick=ticks,
        by_load=config.by_load,
    )
