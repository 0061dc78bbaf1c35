"""One host from its config: every part made once, in one place and in one pass, with what it
needs injected; nothing is changed after construction. `cfp run` (cli/run/serve.py) only opens it,
serves the host's health, and runs it; tests assemble hosts over in-memory clients."""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

import structlog

from leases import LeaseStore, TableLeaseStore
from observers import (
    CloseReason,
    ObserverFactory,
    PluginHost,
    PluginLoadError,
    StorageAccess,
    singleton_jobs,
    sink_health,
)
from observers import (
    dead_letter_dir as observer_dead_letter_dir,  # beside this module's own `dead_letter_dir`
)
from processor import connection
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.storage.feed_storage import FeedStorage
from processor.clock import Clock
from processor.host.balancing.balancer import host_balancer
from processor.host.balancing.tick_watch import TickWatch
from processor.host.health.host_progress import ClientCounts, HostProgress
from processor.host.health.lifecycle import logged_lifecycle
from processor.host.health.presence import Presence
from processor.host.host import Host, HostParts
from processor.host.host_config import DeliveryPolicy, HostConfig, OnObserverError, Placement
from processor.host.leasing.held_lease import HeldLease
from processor.host.leasing.renewer import Renewer
from processor.host.running.hint_runner import HintRunner, HintSource
from processor.host.running.job_runner import JobRunner
from processor.host.running.worker_supervisor import WorkerSupervisor
from processor.host.worker.feed_watcher import CATALOG_AGE_POLLS, FeedWatcher
from processor.host.worker.worker import ReaderFactory, run_worker
from processor.host.worker.worker_env import HostServices, WorkerEnv
from processor.plugins.observer_calls import observer_pool
from processor.plugins.observer_loading import ObserverChoice, load_observer_factory
from processor.reading.processor_identity import claim_identity

log = structlog.get_logger("cfp.host")

ObserverLoader = Callable[[ObserverChoice, PluginHost], ObserverFactory]


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
    observer_pool: Executor | None = None  # its threads end with the host

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
        if self.observer_pool is not None:  # a plain call still blocked is the observer's own
            self.observer_pool.shutdown(wait=False, cancel_futures=True)
        if self.clients.table is not None:
            await self.clients.table.close()
            await self.clients.storage.close()


def assemble(
    config: HostConfig,
    clock: Clock,
    *,
    clients: HostClients | None = None,  # tests: in memory
    load_observer: ObserverLoader = lambda choice, host: load_observer_factory(choice, host=host),
    make_reader: ReaderFactory | None = None,  # tests: scripted shards
) -> AssembledHost:
    """Every part of a host, in one pass (no request is sent yet). Errors: `PluginLoadError`
    for an observer that cannot be loaded."""
    t, placement, me = config.timings, config.placement, config.placement.host_name
    clients = clients or HostClients.of(placement, t.request_timeout_s)

    def storage(conn: str | None) -> StorageAccess:
        return connection.storage_access(
            connection.resolve_other(conn, placement.connection_string)
        )

    plugin_host = PluginHost(
        me, placement.processor_name, placement.connection_string, clock.wall, storage
    )
    store, factory = clients.store, load_observer(config.delivery.observer, plugin_host)
    stuck_s, sink = config.delivery.stuck_after_s, functools.partial(sink_health, factory)
    progress = HostProgress(wall=clock.wall, stuck_after_s=stuck_s, clients=clients.counts,
        processor=placement.processor_name, sink=sink)  # fmt: skip
    lifecycle = logged_lifecycle(clock.monotonic, progress.state.state)
    catalog = FeedCatalog(clients.storage, refresh_s=t.poll_s * CATALOG_AGE_POLLS, clock=clock)
    watcher = FeedWatcher(catalog, every_s=t.poll_s)
    pool = observer_pool(config.delivery.threads)
    services = HostServices(store, catalog, factory, clock, progress.leases, pool,
        dead_letter_dir(config.delivery, factory))  # fmt: skip
    env = WorkerEnv.for_host(config, services, feed_changed=watcher.changed)

    async def work(held: HeldLease) -> CloseReason:
        return await run_worker(held, env, make_reader=make_reader)

    supervisor = WorkerSupervisor(work, clock=clock, fence_after_s=t.fence_after_s)
    presence = Presence(
        store, name=me, lifecycle=lifecycle, leases=progress.leases, clock=clock,
        expiry_s=t.expiry_s, outage=functools.partial(outage_text, factory),
    )  # fmt: skip
    ticks = TickWatch(lifecycle, presence, clock, expiry_s=t.expiry_s)
    balancer = host_balancer(
        config, env, supervisor, store=store, ticks=ticks, counts=progress.balancing
    )
    jobs = [
        JobRunner(job, store=store, me=me, timings=t, clock=clock, progress=progress.jobs)
        for job in singleton_jobs(factory)
    ]
    renewer = Renewer(
        store, lambda: [*supervisor.held(), *(held for job in jobs for held in job.held())],
        every_s=t.renew_every_s, clock=clock, bytes_read=progress.leases.read_so_far,
    )  # fmt: skip
    parts = HostParts(
        config=config, env=env, lifecycle=lifecycle, progress=progress, watcher=watcher,
        supervisor=supervisor, balancer=balancer, ticks=ticks, presence=presence, jobs=jobs,
        renewer=renewer, hints=_hints(config, env, progress, clock))  # fmt: skip
    return AssembledHost(config, Host(parts), clients, pool)


def _hints(
    config: HostConfig, env: WorkerEnv, progress: HostProgress, clock: Clock
) -> HintRunner | None:
    """With `--hints-queue`: the runner of the host's hints, checked against the feed's account."""
    if config.hints is None:
        return None
    placement = config.placement
    source = HintSource(
        connection.parse(placement.connection_string).account,
        placement.processor_name,
        placement.host_name,
    )
    return HintRunner(config.hints, source, env.new_observer, progress.hints, clock)


def outage_text(factory: ObserverFactory) -> str:
    """What the observer cannot write to now, for the host's row ("": nothing)."""
    health = sink_health(factory)
    return health.outage.describe() if health is not None and health.outage else ""


def dead_letter_dir(delivery: DeliveryPolicy, factory: ObserverFactory) -> str | None:
    """`--dead-letter-dir`, else the folder the observer names (the Spark one: its local
    output's). Errors: `PluginLoadError` when `--on-observer-error dead-letter` has none."""
    folder = delivery.dead_letter_dir
    if delivery.on_observer_error is OnObserverError.DEAD_LETTER:
        folder = folder or observer_dead_letter_dir(factory)
        if not folder:
            raise PluginLoadError(
                delivery.observer.spec,
                "--on-observer-error dead-letter needs --dead-letter-dir (a local folder)",
            )
    return folder
