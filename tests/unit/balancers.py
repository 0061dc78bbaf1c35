"""A balancer over an in-memory lease store and a fixed feed, whose workers only get counted."""

from __future__ import annotations

import asyncio
from typing import Any

from leases import HostId, LeaseStore
from leases.policy.timings import derive_timings
from processor.clock import SystemClock
from processor.host.balancing.balancer import Balancer, BalancerParts, BalancingRules
from processor.host.balancing.lease_creator import LeaseCreator
from processor.host.running.worker_supervisor import WorkerSupervisor
from processor.reading.position_book import PositionBook


class FixedFeed:
    """A catalog that lists the same segments and shards every time."""

    def __init__(self, segments: list[str] | None = None, shards: set[str] | None = None) -> None:
        self._segments, self._shards = segments or [], shards or set()

    async def segments(self, **_: object) -> list[str]:
        return list(self._segments)

    async def shard_names(self, segments: list[str], **_: object) -> set[str]:
        return set(self._shards)


def balancer(
    store: LeaseStore, me: str, feed: FixedFeed | None = None, *, scan_partitions: int = 0
) -> tuple[Balancer, list[str]]:
    """A balancer for host `me`, and the tokens of the workers it starts (none really runs)."""
    started: list[str] = []
    supervisor = WorkerSupervisor(
        lambda held: asyncio.sleep(0), clock=SystemClock(), fence_after_s=9
    )
    supervisor.start = lambda lease: started.append(lease.token) or True  # type: ignore[method-assign]
    catalog: Any = feed or FixedFeed()
    parts = BalancerParts(
        store,
        catalog,
        supervisor,
        PositionBook(store.list_leases, refresh_s=1),
        creator=LeaseCreator(store, catalog, SystemClock(), scan_partitions=scan_partitions),
    )
    b = Balancer(parts, BalancingRules(HostId(me), derive_timings(3.0)), clock=SystemClock())
    return b, started
