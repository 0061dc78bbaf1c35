"""One host from its config: every part made once, in one place, with what it needs injected;
nothing is changed after construction. `cfp run` (cli/serve.py) only opens it, serves its
health, and runs it."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from leases import TableLeaseStore
from observers import load_observer_factory
from processor import connection
from processor.changefeed.storage import FeedStorage
from processor.clock import Clock
from processor.host.config import HostConfig
from processor.host.endpoints import HostHealth
from processor.host.host import Host, host_lifecycle
from processor.host.progress import HostProgress
from processor.reading.identity import claim_identity

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
        config = self.config
        await self.store.open()
        await claim_identity(
            self.store,
            config.identity,
            processor=config.processor_name,
            table=config.lease_table,
            lease_partitions=config.lease_partitions,
        )
        if (fixed := await self.store.lease_partitions()) != config.lease_partitions:
            log.info("lease_partitions.fixed", partitions=fixed, asked=config.lease_partitions)

    async def close(self) -> None:
        await self.store.close()
        await self.storage.close()


def assemble(config: HostConfig, clock: Clock) -> AssembledHost:
    """Every part of a host (no request is sent yet). Errors: `PluginLoadError` for an observer
    that cannot be loaded."""
    t = config.timings
    store = connection.lease_store(
        config.lease_connection_string,
        table=config.lease_table,
        processor=config.processor_name,
        request_timeout_s=t.request_timeout_s,
    )
    storage = FeedStorage.from_connection_string(config.connection_string)
    progress = HostProgress(
        wall=clock.wall,
        stuck_after_s=config.stuck_after_s,
        storage_requests=storage.requests.by_kind,
        lease_requests=store.requests,
        lease_rows_listed=lambda: store.rows_listed,
    )
    lifecycle = host_lifecycle(clock, progress)
    host = Host(
        config,
        store=store,
        storage=storage,
        observer_factory=load_observer_factory(config.observer, host_name=config.host_name),
        clock=clock,
        lifecycle=lifecycle,
        progress=progress,
    )
    health = HostHealth(
        host_name=config.host_name,
        processor=config.processor_name,
        lifecycle=lifecycle,
        progress=progress,
        expiry_s=t.expiry_s,
        stall_after_s=max(STALL_AFTER_MIN_S, STALL_AFTER_TICKS * t.acquire_every_s),
        loop_age_s=host.loop_age_s,
        store_silent_s=host.store_silent_s,
        extra={"leaseTable": config.lease_table, "observer": config.observer.spec},
    )
    return AssembledHost(config, host, health, store, storage)
