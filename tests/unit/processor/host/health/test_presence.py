"""A host's row: how often it lists the other host rows to forget silent ones."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from leases import HostId, HostReport, MemoryLeaseStore
from processor.clock import SystemClock
from processor.host.health.host_progress import HostProgress
from processor.host.health.lifecycle import Lifecycle
from processor.host.health.presence import FORGET_EVERY, Presence


class CountingStore(MemoryLeaseStore):
    """Counts publishes and listings of host rows; sets `done` after `until` publishes."""

    def __init__(self, until: int) -> None:
        super().__init__()
        self.published = 0
        self.listed = 0
        self.until = until
        self.done = asyncio.Event()

    async def publish_host(self, report: HostReport) -> None:
        self.published += 1
        await super().publish_host(report)
        if report.name == "me" and self.published >= self.until:
            self.done.set()

    async def list_hosts(self) -> list[HostReport]:
        self.listed += 1
        return await super().list_hosts()


async def looks_per_publish(hosts: int, publishes: int) -> float:
    store = CountingStore(publishes)
    now = datetime.now(UTC)
    for i in range(hosts - 1):
        await store.publish_host(HostReport(HostId(f"other{i}"), "RUNNING", now, now, 0, 30.0))
    store.published = 0
    presence = Presence(
        store,
        name=HostId("me"),
        lifecycle=Lifecycle(SystemClock()),
        leases=HostProgress().leases,
        clock=SystemClock(),
        expiry_s=30.0,
    )
    await presence.run(store.done, every_s=0.0001)
    return store.listed / store.published


async def test_a_host_lists_the_host_rows_about_once_per_as_many_publishes_as_there_are_hosts() -> (
    None
):
    few = await looks_per_publish(3, 300)
    many = await looks_per_publish(120, 600)
    assert abs(few - 1 / FORGET_EVERY) < 0.01  # a small processor: every 30 publishes
    assert abs(many - 1 / 120) < 0.004  # one look per 120 publishes: 120 rows over 120 hosts
