"""Real hosts with `--observer spark`, each with an embedded local Spark or all sharing one Spark
Connect server started with `cfp spark-connect`: the change log holds every event exactly once for
a plain Parquet reader and `cfp verify` finds the state table equal to the live listing, also
after a host is killed between a Spark write and its checkpoints, and after a paused host
(a zombie) publishes a write late."""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from azure.storage.blob.aio import BlobServiceClient

from leases import Lease
from processor.changefeed.emulator.azurite import ROOT, Azurite, free_port, wait_for_port
from processor.changefeed.emulator.emulator import Emulator, EmulatorConfig
from processor.changefeed.layout import segment_path
from processor.lease_position import LeasePosition
from tests.cluster import Cluster, Table, all_caught_up, owners
from tests.helpers import Feed, emulate_afresh, json_lines, run_cfp

_processors = itertools.count()
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
async def feed(azurite: Azurite) -> Feed:
    conn = azurite.connection_string
    records = await emulate_afresh(
        conn, seed=21, segments=3, events_per_segment=1500, shards=(4, 6, 4)
    )
    return Feed(conn, {str(r["id"]) for r in records if r["eventType"] != "Control"})


@pytest.fixture(scope="module")
def spark_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`cfp spark-connect` on a free loopback port; stopped with SIGTERM, which must exit 0."""
    port = free_port()
    logs = tmp_path_factory.mktemp("spark-connect")
    server = subprocess.Popen(
        [sys.executable, "-m", "processor", "spark-connect", "--port", str(port),
         "--spark-master", "local[2]", "--log-dir", str(logs)],
        cwd=ROOT, stdout=(logs / "out.log").open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for_port(port, timeout_s=120)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0, (logs / "out.log").read_text()[-2000:]


@pytest.fixture(params=["local", "connect"])
async def cluster(
    request: pytest.FixtureRequest, feed: Feed, tmp_path: Path
) -> AsyncIterator[Cluster]:
    spark = (
        ["--spark-master", "local[1]"]
        if request.param == "local"
        else ["--spark-remote", request.getfixturevalue("spark_connect")]
    )
    args = (
        "--lease-expiration", "4",
        "--poll-interval", "0.5",
        "--observer", "spark",
        "--output", str(tmp_path / "tables"),
        "--spark-warm-up-rows", "0",
        *spark,
    )  # fmt: skip
    c = Cluster(feed.conn, f"spark{next(_processors)}", tmp_path, args=args)
    try:
        yield c
    finally:
        c.kill_all()


def change_log_ids(cluster: Cluster) -> Counter[str]:
    """The ids as a plain Parquet reader (pyarrow, hive partitions) sees them."""
    data = ds.dataset(cluster.workdir / "tables" / "changes", format="parquet", partitioning="hive")
    return Counter(data.to_table(columns=["id"]).column("id").to_pylist())


async def caught_up(cluster: Cluster) -> Table:
    async with cluster.store() as store:
        table = Table(await store.open())
        await table.until(all_caught_up, within_s=180, what="every lease caught up")
        return table


def assert_exactly_once(cluster: Cluster, feed: Feed) -> None:
    ids = change_log_ids(cluster)
    assert set(ids) == feed.ids, f"{len(feed.ids - set(ids))} missing"
    twice = [i for i, n in ids.items() if n > 1]
    assert not twice, f"{len(twice)} ids twice in the change log"


def verify(cluster: Cluster, feed: Feed) -> subprocess.CompletedProcess[str]:
    return run_cfp(feed.conn, "verify", "--output", str(cluster.workdir / "tables"))


def assert_state_equals_the_account(cluster: Cluster, feed: Feed) -> None:
    done = verify(cluster, feed)
    assert done.returncode == 0 and "EQUAL" in done.stdout, done.stdout + done.stderr


def logged_rows(cluster: Cluster, names: tuple[str, ...], event: str) -> int:
    return sum(
        e.get("rows", 0) for n in names for e in cluster.log_events(n) if e.get("event") == event
    )


async def test_three_hosts_write_each_event_once_and_the_state_equals_the_account(
    cluster: Cluster, feed: Feed
) -> None:
    for name in ("h1", "h2", "h3"):
        cluster.start(name, "--until-caught-up")
    assert {n: cluster.wait(n, timeout=240) for n in ("h1", "h2", "h3")} == {
        "h1": 0, "h2": 0, "h3": 0
    }  # fmt: skip
    assert_exactly_once(cluster, feed)
    schema = ds.dataset(cluster.workdir / "tables" / "changes", partitioning="hive").schema
    assert str(schema.field("event_time").type) == "timestamp[us, tz=UTC]"
    assert_state_equals_the_account(cluster, feed)
    state = ds.dataset(cluster.workdir / "tables" / "state").to_table(columns=["container", "blob"])
    keys = list(zip(state["container"].to_pylist(), state["blob"].to_pylist(), strict=True))
    assert len(keys) == len(set(keys)), "a blob twice in a plain read of the state"

    async with BlobServiceClient.from_connection_string(feed.conn) as service:
        extra = service.get_blob_client("cfp-emu-0", "written/without/the/feed.txt")
        await extra.upload_blob(b"x")  # a change the feed does not explain
        try:
            done = verify(cluster, feed)
        finally:
            await extra.delete_blob()
    assert done.returncode == 1, done.stdout
    assert "cfp-emu-0/written/without/the/feed.txt: missing from the state" in done.stdout
    if "--spark-remote" in cluster.args:  # on the server already running: no fourth local JVM
        assert_the_change_log_carries_the_envelope(cluster, feed)


def assert_the_change_log_carries_the_envelope(cluster: Cluster, feed: Feed) -> None:
    """The envelope's columns, through `cfp sql`'s `envelope` view (on the cluster's Spark)."""
    spark = (
        cluster.args[cluster.args.index("--spark-master") :][:2]
        if ("--spark-master" in cluster.args)
        else cluster.args[cluster.args.index("--spark-remote") :][:2]
    )
    query = (
        "SELECT stream_name, read_method, op, count(DISTINCT uuid) AS ids,"
        " min(size(sort_keys)) AS keys, sum(CASE WHEN sort_keys[1] = get_json_object(payload,"
        " '$.data.sequencer') AND source_timestamp <= read_timestamp THEN 1 ELSE 0 END) AS agree,"
        " count(*) AS n FROM envelope GROUP BY stream_name, read_method, op ORDER BY op"
    )
    done = run_cfp(
        feed.conn, "sql", "--output", str(cluster.workdir / "tables"), *spark, "--json", query,
        timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json_lines(done.stdout)
    assert [(r["stream_name"], r["read_method"], r["op"]) for r in rows] == [
        (cluster.processor, "change-feed", "delete"),
        (cluster.processor, "change-feed", "upsert"),
    ]
    assert sum(r["ids"] for r in rows) == len(feed.ids)
    assert all(r["keys"] == 3 and r["agree"] == r["n"] for r in rows)


# The kill and zombie cases run on the Spark Connect server only: the protocol they test (publish,
# replay detection, refused checkpoints) is the sink's own and the same with an embedded session,
# which the three-host test above and the chaos suite (local Spark per host, kills and pauses)
# exercise; three embedded JVMs on two cores would add about two minutes to `make test`.
@pytest.mark.parametrize("cluster", ["connect"], indirect=True)
async def test_a_host_killed_after_a_write_before_its_checkpoints(
    cluster: Cluster, feed: Feed
) -> None:
    cluster.start("h2", CFP_TEST_SPARK_PAUSE_AFTER_PUBLISH_S="60")
    # h2 published a Spark write (change log and state) and now waits before checkpointing it
    await cluster.logged("h2", "spark.published", within_s=120)
    cluster.signal("h2", signal.SIGKILL)
    cluster.wait("h2")
    cluster.start("h2")  # back under the same name: it replays from the old checkpoints
    cluster.start("h1")
    cluster.start("h3")
    await caught_up(cluster)
    replayed = logged_rows(cluster, ("h1", "h2", "h3"), "spark.replay_skipped")
    assert replayed > 0, "the replay of the killed host's unconfirmed rows was not recognised"
    assert set(cluster.stop_all().values()) == {0}
    assert_exactly_once(cluster, feed)
    assert_state_equals_the_account(cluster, feed)


@pytest.mark.parametrize("cluster", ["connect"], indirect=True)
async def test_a_zombie_hosts_late_write_is_harmless(cluster: Cluster, feed: Feed) -> None:
    # small writes: h1 publishes one, then stops before publishing the next
    cluster.start("h1", "--spark-max-rows", "500", CFP_TEST_SPARK_PAUSE_BEFORE_PUBLISH_S="8")
    await cluster.logged("h1", "spark.pausing_before_publish", within_s=120)
    cluster.signal("h1", signal.SIGSTOP)  # a zombie holding a Spark write it has not published
    cluster.start("h2")
    async with cluster.store() as store:
        table = Table(await store.open())
        await table.until(
            lambda leases: all_caught_up(leases) and set(owners(leases)) == {"h2"},
            within_s=180,
            what="h2 owns every lease and caught up",
        )
    before = change_log_ids(cluster)
    cluster.signal("h1", signal.SIGCONT)  # wakes up, publishes its old write, checkpoints
    await cluster.logged("h1", "spark.checkpoint_refused", within_s=60)
    assert logged_rows(cluster, ("h1",), "spark.replay_skipped") > 0
    assert change_log_ids(cluster) == before, "the zombie's late write changed the change log"
    assert set(cluster.stop_all().values()) == {0}
    assert_exactly_once(cluster, feed)
    assert_state_equals_the_account(cluster, feed)


# Last in the module: the live workload below changes the account the tests above share.
@pytest.mark.parametrize("cluster", ["connect"], indirect=True)
async def test_an_initial_scan_during_changes_ends_with_the_state_equal(
    cluster: Cluster, feed: Feed
) -> None:
    """The Spark observer runs without the barrier: feed events may reach the tables before a
    blob's backfill, and the state table's sequencing (a backfill sorts below every change)
    must make the order irrelevant."""
    stop = asyncio.Event()
    async with BlobServiceClient.from_connection_string(feed.conn) as service:
        emulator = Emulator(service, EmulatorConfig(seed=23, shards=(4, 6, 4)))
        live = asyncio.create_task(
            emulator.run_live(stop, rate_per_s=60, segment_seconds=3, finish=True)
        )
        try:
            for name in ("h1", "h2"):
                cluster.start(name, "--initial-scan", "--scan-partitions", "3")
            async with cluster.store() as store:
                table = Table(await store.open())
                await table.until(
                    lambda leases: (
                        sum(1 for x in leases if x.token.startswith("scan-")) == 3
                        and all(x.caught_up for x in leases if x.token.startswith("scan-"))
                    ),
                    within_s=180,
                    what="the scan done",
                )
                assert sum(emulator.summary.events.values()) > 0  # changes during the scan
                stop.set()
                await live
                last = segment_path(datetime.fromisoformat(emulator.summary.segments[-1][:17]))

                def through_the_last_segment(leases: list[Lease]) -> bool:
                    return all(
                        x.caught_up
                        and LeasePosition.from_json(x.continuation).order_key()
                        >= LeasePosition(last, True).order_key()
                        for x in leases
                        if not x.token.startswith("scan-")
                    )

                await table.until(through_the_last_segment, within_s=180, what="the last segment")
            assert set(cluster.stop_all().values()) == {0}
        finally:
            stop.set()
            await asyncio.gather(live, return_exceptions=True)
    assert_state_equals_the_account(cluster, feed)
    data = ds.dataset(cluster.workdir / "tables" / "changes", format="parquet", partitioning="hive")
    methods = Counter(data.to_table(columns=["read_method"]).column("read_method").to_pylist())
    assert methods["backfill"] > 0 and methods["change-feed"] > 0
