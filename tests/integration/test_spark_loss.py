"""Thin hosts whose Spark Connect server is lost: real `cfp spark-connect` servers killed with
SIGKILL while two `cfp run --observer spark` hosts write 15,000 events into Delta tables in
Azurite's blob storage.

- A server killed and a new one started on its port: the hosts write again through it without
  a restart, each event is in the change log once, the state equals the account; the killed
  command's JVM went with it (no orphan holding the port).
- Two servers, one killed with a write held inside it: the hosts move to the other.
- A server that never comes back: the hosts keep their leases, queue no more than a write's
  worth, say why in `/status`, `/readyz`, `/metrics` and `cfp status`, and drain on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.error
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from leases import Lease
from processor.emulator.azurite import Azurite
from tests.cluster import Cluster, Table
from tests.connect_servers import ConnectServer
from tests.helpers import Feed, get_text, metric, until
from tests.spark_cluster import (
    SparkCluster,
    assert_exactly_once,
    assert_state_equals_the_account,
    spark_cluster,
    start_with_a_write_held,
    tables_feed,
)

# two hosts and one or two servers of their own beside the suite's other JVMs on two cores
pytestmark = pytest.mark.timeout(900)
NAMES = ("h1", "h2")
MAX_ROWS = 500  # rows per write while the server stays away: a small bound on what waits
# rows per write of a run that must end: 15 writes of 15,000 events or more, half the commits
RUN_ROWS = 1000
BATCH = 100  # events per batch (--max-batch-events)


@pytest.fixture(scope="module")
async def feed(azurite: Azurite) -> AsyncIterator[Feed]:
    """15,000 real blob operations and their change feed, shared by the module's processors."""
    async with tables_feed(
        azurite, seed=57, segments=3, events_per_segment=5000, shards=(4, 6, 4)
    ) as made:
        yield made


def events(cluster: Cluster, name: str, event: str) -> list[dict[str, Any]]:
    return [e for e in cluster.log_events(name) if e.get("event") == event]


async def commits(cluster: Cluster, at_least: int) -> None:
    """Until the hosts made `at_least` change log writes between them."""

    async def made() -> bool:
        return sum(len(events(cluster, n, "spark.committed")) for n in NAMES) >= at_least

    await until(made, f"{at_least} change log writes")


async def either_logged(cluster: Cluster, event: str) -> None:
    async def logged() -> bool:
        return any(events(cluster, n, event) for n in NAMES)

    await until(logged, f"a host logging {event}")


def start_hosts(cluster: SparkCluster, *extra: str, max_rows: int = MAX_ROWS) -> None:
    for name in NAMES:
        cluster.start(
            name, "--spark-max-rows", str(max_rows), "--max-batch-events", str(BATCH), *extra
        )


async def test_hosts_write_through_a_new_server_on_the_port_of_the_one_killed(
    feed: Feed, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    server = ConnectServer(tmp_path / "connect")
    server.start()
    try:
        async with spark_cluster(feed, tmp_path, server.url) as cluster:
            start_hosts(cluster, "--until-caught-up", max_rows=RUN_ROWS)
            await commits(cluster, 3)
            assert cluster.running() == list(NAMES), "caught up before the server's loss"
            jvm = server.kill()  # SIGKILL `cfp spark-connect` alone...
            assert jvm is not None
            server.wait_gone(jvm)  # ...and its JVM goes with it, freeing the port
            await either_logged(cluster, "spark.unavailable")
            server.start()  # a new server on the same port
            codes = {n: await asyncio.to_thread(cluster.wait, n) for n in NAMES}
            assert codes == dict.fromkeys(NAMES, 0)
            for name in NAMES:  # no restart: each host that saw the loss came back by itself
                lost = events(cluster, name, "spark.unavailable")
                back = events(cluster, name, "spark.available")
                assert len(back) == len(lost) and {e["remote"] for e in back} <= {server.url}
            assert sum(len(events(cluster, n, "spark.write_failed")) for n in NAMES) == 0
            assert_exactly_once(cluster, feed, request)
            assert_state_equals_the_account(cluster)
    finally:
        server.stop()


async def test_hosts_move_to_the_other_server_when_theirs_is_killed_mid_write(
    feed: Feed, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    servers = [ConnectServer(tmp_path / f"connect{i}") for i in (1, 2)]
    for server in servers:
        server.start()
    flag = tmp_path / "release"
    try:
        remotes = ",".join(s.url for s in servers)
        async with spark_cluster(feed, tmp_path, remotes) as cluster:
            # h1's second write held inside its server, its Delta transaction open
            await start_with_a_write_held(
                cluster, "h1", flag, "--until-caught-up", max_rows=RUN_ROWS
            )
            cluster.start("h2", "--spark-max-rows", str(RUN_ROWS), "--until-caught-up")
            (connected,) = events(cluster, "h1", "spark.connected")
            (lost,) = [s for s in servers if s.url == connected["remote"]]
            (other,) = [s for s in servers if s is not lost]
            lost.wait_gone(lost.kill())  # mid-write
            codes = {n: await asyncio.to_thread(cluster.wait, n) for n in NAMES}
            assert codes == dict.fromkeys(NAMES, 0)
            moved = events(cluster, "h1", "spark.available")
            assert [e["remote"] for e in moved] == [other.url], moved
            assert_exactly_once(cluster, feed, request)
            assert_state_equals_the_account(cluster)
    finally:
        flag.touch()  # never leave a write held (its server is gone by now)
        for server in servers:
            server.stop()


async def test_hosts_whose_server_never_comes_back_keep_their_leases_and_drain(
    feed: Feed, tmp_path: Path
) -> None:
    server = ConnectServer(tmp_path / "connect")
    server.start()
    async with spark_cluster(feed, tmp_path, server.url) as cluster:
        start_hosts(cluster, "--drain-timeout", "60")
        await commits(cluster, 3)
        server.wait_gone(server.kill())
        for name in NAMES:
            await cluster.logged(name, "spark.unavailable")
        async with cluster.store() as store:
            table = Table(await store.open())
            held = await keeps_its_leases(table, renewals=3)
            first = [await host_view(cluster, n) for n in NAMES]
            await keeps_its_leases(table, renewals=3, held=held)
            second = [await host_view(cluster, n) for n in NAMES]
            for before, after in zip(first, second, strict=True):
                assert_bounded_and_said(before, after)
            hosts = {h["host"]: h for h in cluster.status()["hosts"]}
            assert all(hosts[n]["outage"].startswith("spark unavailable since") for n in NAMES)
            for name in NAMES:
                cluster.signal(name, signal.SIGTERM)
            codes = {n: await asyncio.to_thread(cluster.wait, n) for n in NAMES}
            assert codes == dict.fromkeys(NAMES, 0)
            for name in NAMES:  # drained: every lease let go of, nothing left behind
                assert not events(cluster, name, "host.drain_cut")
            leases = await table.leases()
            assert leases and all(x.owner is None for x in leases), [x.owner for x in leases]


async def keeps_its_leases(
    table: Table, *, renewals: int, held: dict[str, Lease] | None = None
) -> dict[str, Lease]:
    """Until every lease was renewed `renewals` times more by the host that held it, at the
    same epoch (a lease moving fails at once); the leases as they stood at first."""
    first = held or {x.token: x for x in await table.leases()}
    assert first and all(x.owner in NAMES for x in first.values()), first

    def renewed(leases: list[Lease]) -> bool:
        for x in leases:
            was = first[x.token]
            assert (x.owner, x.epoch) == (was.owner, was.epoch), f"lease {x.token} moved: {x}"
        return all(x.version >= first[x.token].version + renewals for x in leases)

    await table.until(renewed, what=f"{renewals} more renewals of every lease")
    return first


async def host_view(cluster: SparkCluster, name: str) -> dict[str, Any]:
    """What host `name` says of itself: /status, /readyz, /healthz, /metrics."""
    base = await cluster.endpoint(name)
    view: dict[str, Any] = json.loads(await asyncio.to_thread(get_text, f"{base}/status"))
    view["ready"] = await asyncio.to_thread(probe, f"{base}/readyz")
    view["live"] = await asyncio.to_thread(probe, f"{base}/healthz")
    view["metrics"] = await asyncio.to_thread(get_text, f"{base}/metrics")
    return view


def probe(url: str) -> tuple[int, dict[str, Any]]:
    try:
        return 200, json.loads(get_text(url))
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def assert_bounded_and_said(before: dict[str, Any], after: dict[str, Any]) -> None:
    """A host waiting for its server: what it holds stays what its sink had queued and in flight
    at the loss (at most three writes' worth and a batch), and no more is accepted, though its
    leases have far more left to read; and it says why, unready but alive."""
    sink = after["sink"]
    assert sink["available"] is False and sink["unavailableSince"], sink
    assert after["outage"].startswith("spark unavailable since"), after["outage"]
    assert 0 < sink["pendingRows"] <= 3 * MAX_ROWS + BATCH, sink
    still = (after["events"], sink["pendingRows"])
    assert still == (before["events"], before["sink"]["pendingRows"]), (before, after)
    assert after["lagEvents"] > 3 * MAX_ROWS + BATCH, after["lagEvents"]  # more there, not read
    code, ready = after["ready"]
    assert code == 503 and ready["reason"].startswith("spark unavailable since"), ready
    assert after["live"][0] == 200, after["live"]
    assert metric(after["metrics"], "cfp_observer_unavailable") == 1
    assert metric(after["metrics"], "cfp_seconds_since_progress") > 0
