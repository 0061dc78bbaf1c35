"""Storage failing under running hosts, one fault at a time: every connection dropped for longer
than the fencing interval, every byte delayed, Azurite stopped and started again on its data.

The hosts reach Azurite only through `tests.chaos.proxy.FaultyProxy` on loopback. Each test
runs two real `cfp run --until-caught-up` hosts over one emulated feed (its own processor) and
checks that they ride the fault out: no host exits early, every event is delivered, no lease's
continuation goes back, and the fencing path really ran where the fault outlasted it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from leases import TableLeaseStore
from processor.connection import azurite_connection_string
from processor.emulator.azurite import Azurite
from tests import patience
from tests.chaos.proxy import FaultyProxy
from tests.cluster import LEASE_TABLE, Cluster, Table, quick_host_args, sampled
from tests.helpers import emulate_afresh, until

EXPIRY_S = 3.0
ARGS = quick_host_args(batch=50, expiry_s=EXPIRY_S)
_processors = itertools.count()

pytestmark = pytest.mark.timeout(300)


@dataclass
class World:
    azurite: Azurite
    blob: FaultyProxy
    table: FaultyProxy
    ids: set[str]

    @property
    def via_proxy(self) -> str:
        return azurite_connection_string(blob_port=self.blob.port, table_port=self.table.port)


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    """Azurite of its own (a test restarts it) with a feed of 3,000 events, behind proxies."""
    azurite = Azurite(tmp_path_factory.mktemp("azurite-faults")).start()
    try:
        records = await emulate_afresh(
            azurite.connection_string,
            seed=31,
            segments=3,
            events_per_segment=1000,
            shards=(3, 4, 2),
            feed_only=True,  # the hosts never look at the blobs
        )
        ids = {str(r["id"]) for r in records}
        blob = await FaultyProxy(azurite.blob_port).start()
        table = await FaultyProxy(azurite.table_port).start()
        try:
            yield World(azurite, blob, table, ids)
        finally:
            await blob.close()
            await table.close()
    finally:
        azurite.stop()


@pytest.fixture
async def cluster(world: World, tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(
        world.via_proxy,
        f"faults{next(_processors)}",
        tmp_path,
        args=ARGS,
        env={"CFP_TEST_BATCH_DELAY_S": "0.05"},
    )
    try:
        yield c
    finally:
        c.kill_all()
        world.blob.heal()
        world.table.heal()


async def _start_and_wait_for_a_third(cluster: Cluster, world: World) -> None:
    for name in ("h1", "h2"):
        cluster.start(name, "--until-caught-up")
    deadline = patience.deadline()
    while len({d["id"] for d in cluster.deliveries()}) < len(world.ids) // 3:
        assert time.monotonic() < deadline, "no progress"
        assert len(cluster.running()) == 2, "a host exited"
        await asyncio.sleep(0.1)


async def _finish(cluster: Cluster, world: World, table: Table) -> None:
    codes = {n: await asyncio.to_thread(cluster.wait, n) for n in ("h1", "h2")}
    assert codes == {"h1": 0, "h2": 0}
    assert {d["id"] for d in cluster.deliveries()} == world.ids
    await table.leases()
    assert table.watch.backwards == []


@pytest.fixture
async def table(cluster: Cluster, world: World) -> AsyncIterator[Table]:
    """The lease table, sampled directly (not through the proxy) every 0.2 s, outages aside."""
    async with (
        TableLeaseStore.from_connection_string(
            world.azurite.connection_string, table=LEASE_TABLE, processor=cluster.processor
        ) as store,
        sampled(store) as view,
    ):
        yield view


def _fenced(cluster: Cluster) -> int:
    return sum(
        1
        for n in ("h1", "h2")
        for e in cluster.log_events(n)
        if e.get("event") == "lease.renew_failed" and e.get("fenced")
    )


async def test_connections_dropped_past_the_fencing_interval(
    cluster: Cluster, world: World, table: Table
) -> None:
    await _start_and_wait_for_a_third(cluster, world)
    base = await cluster.endpoint("h1")
    for proxy in (world.blob, world.table):
        proxy.drop(EXPIRY_S * 3)  # longer than the fencing interval (0.8 x expiry)
    # two expiries after the first silent one: a balancing tick then must have seen the silence,
    # even on a loaded machine where a tick's failing requests take a while
    states = await _states_seen(base, EXPIRY_S * 3)
    assert len(cluster.running()) == 2, "a host exited during the outage"
    assert _fenced(cluster) > 0, "no lease was fenced by its own host"
    # failed (not ready) once the lease store is silent for a whole expiry, never a restart
    assert states[0] == "running" and "failed" in states, states
    await _finish(cluster, world, table)
    # and running again once it answers (the host may have caught up and exited since)
    logged = [e["state"] for e in cluster.log_events("h1") if e.get("event") == "host.state"]
    assert "running" in logged[logged.index("failed") :], logged


async def _states_seen(base: str, seconds: float) -> list[str]:
    """The states /readyz reports over `seconds` (each change once), checking that the probes
    agree: ready only while running (running with a silent store is not ready either: the state
    turns to failed at the next balancing tick), alive throughout."""
    seen: list[str] = []
    deadline = time.monotonic() + seconds  # fixed on purpose: the fault's window
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            async with http.get(f"{base}/readyz") as r:
                doc = await r.json()
                state = doc["state"]
                assert r.status == 503 or state == "running", (r.status, doc)
                assert r.status == 200 or state != "running" or "lease store" in doc["reason"]
            async with http.get(f"{base}/healthz") as r:
                assert r.status == 200
            if not seen or seen[-1] != state:
                seen.append(state)
            await asyncio.sleep(0.05)
    return seen


async def test_every_byte_delayed(cluster: Cluster, world: World, table: Table) -> None:
    await _start_and_wait_for_a_third(cluster, world)
    for proxy in (world.blob, world.table):
        proxy.delay(0.4, 6.0)
    await asyncio.sleep(6.0)  # fixed on purpose: the fault's window (proxy.delay's 6 s)
    assert len(cluster.running()) == 2, "a host exited while storage was slow"
    await _finish(cluster, world, table)


async def test_azurite_stopped_and_started_again(
    cluster: Cluster, world: World, table: Table
) -> None:
    await _start_and_wait_for_a_third(cluster, world)
    world.azurite.stop()

    async def fenced_by_its_own_host() -> bool:
        return _fenced(cluster) > 0

    await until(fenced_by_its_own_host, "a lease fenced by its own host", every_s=0.25)
    await asyncio.to_thread(world.azurite.start)  # same ports, same data folder
    assert len(cluster.running()) == 2, "a host exited while Azurite was down"
    await _finish(cluster, world, table)
