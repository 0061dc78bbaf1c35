"""Real hosts with `--observer spark` sharing one Spark Connect server started with
`cfp spark-connect`, writing the Delta tables into Azurite's blob storage through ABFS. Spark and
the `deltalake` package each read every event exactly once from the change log and `cfp verify`
finds the state table equal to the live listing, also after a host is killed between a Delta
commit and its checkpoints, and after a host stopped with its write in flight (a zombie) wakes up
and is fenced; and the state job moves to another host when the host running it is killed. The
embedded session's cases are in test_delta_tables.py and test_fenced_change_log.py."""

from __future__ import annotations

import asyncio
import json
import math
import signal
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from azure.storage.blob.aio import BlobServiceClient
from deltalake import DeltaTable, QueryBuilder

from leases import Lease
from processor import connection
from processor.changefeed.storage.layout import segment_path
from processor.emulator.emulator import Emulator, EmulatorConfig
from processor.emulator.grid_events import grid_event, queue_text
from processor.reading.lease_position import LeasePosition
from tests import patience
from tests.cluster import Cluster, Table
from tests.helpers import Feed, get_text, metric, read_all, run_cfp
from tests.jvms import install_archive, jvm_pids, maps_file
from tests.spark_cluster import (
    EXPIRY_S,
    TABLES_CONTAINER,
    SparkCluster,
    assert_a_zombie_write_in_flight_is_refused,
    assert_exactly_once,
    assert_state_equals_the_account,
    assert_verify_finds_a_change_the_feed_lacks,
    caught_up,
    delta_rs_column,
    feed,
    logged_rows,
    remote_sql,
    spark_cluster,
    spark_connect_server,
    start_with_a_write_held,
    took_everything,
)
from tests.venvs import has_module, run_in, virtualenv

# three hosts and a Spark Connect server beside two other test workers' JVMs on two cores: CI
# once took 9 minutes for what takes 2 alone (its commits 8 times slower)
pytestmark = pytest.mark.timeout(900)
__all__ = ["feed"]  # the module's fixture


@pytest.fixture(scope="module")
def spark_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`cfp spark-connect` on a free loopback port; stopped with SIGTERM, which must exit 0."""
    with spark_connect_server(tmp_path_factory.mktemp("spark-connect"), lasting=True) as url:
        yield url


@pytest.fixture
async def cluster(feed: Feed, tmp_path: Path, spark_connect: str) -> AsyncIterator[SparkCluster]:
    async with spark_cluster(feed, tmp_path, spark_connect) as c:
        yield c


async def test_hosts_write_each_event_once_and_the_state_equals_the_account(
    cluster: SparkCluster, feed: Feed, request: pytest.FixtureRequest
) -> None:
    """Three hosts on the Spark Connect server, until caught up."""
    names = ("h1", "h2", "h3")
    for name in names:
        cluster.start(name, "--until-caught-up")
    codes = {n: cluster.wait(n) for n in names}
    assert codes == dict.fromkeys(names, 0)
    assert_one_last_run_of_the_state_job(cluster, names)
    assert_exactly_once(cluster, feed, request)
    assert_state_equals_the_account(cluster)
    said = await assert_verify_finds_a_change_the_feed_lacks(cluster, feed)
    assert f"nor {TABLES_CONTAINER}: the tables' own container" in said
    assert_the_change_log_carries_the_envelope(cluster, feed)
    assert_the_history_accounts_for_every_event(cluster, feed)
    assert_cfp_optimize_compacts_every_table(cluster)


def assert_one_last_run_of_the_state_job(cluster: SparkCluster, names: tuple[str, ...]) -> None:
    """The job's holder ran it once more as it left; the other hosts, caught up too, waited
    for that run (however slow) and did not run it beside it."""
    logged = {n: [e.get("event") for e in cluster.log_events(n)] for n in names}
    finals = [
        n
        for n in names
        for e in cluster.log_events(n)
        if e.get("event") == "job.ran" and e["final"]
    ]
    waited = [n for n in names if "job.final_done_by_holder" in logged[n]]
    assert len(finals) == 1 and sorted(finals + waited) == sorted(names), (finals, waited)


def assert_cfp_optimize_compacts_every_table(cluster: SparkCluster) -> None:
    """`cfp optimize`, on the Spark Connect server, compacts the three tables in Azurite's blob
    storage (each of the state job's runs added a file to the history) and changes no row."""
    assert cluster.remote is not None
    done = run_cfp(
        cluster.conn, "optimize", "--output", cluster.uri, "--spark-remote", cluster.remote
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    compacted = {line.split(": ")[0]: line for line in done.stdout.splitlines()}
    output = cluster.output
    assert compacted.keys() == {output.changes, output.state, output.history}, done.stdout
    assert compacted[output.history].endswith(" 1 after"), done.stdout
    assert_state_equals_the_account(cluster)


def assert_the_history_accounts_for_every_event(cluster: SparkCluster, feed: Feed) -> None:
    """`cfp sql`'s history views: the change log's appends wrote each event once between
    them, and the state's last run recorded the change log's last version as applied."""
    query = (
        "SELECT (SELECT sum(CAST(operationMetrics['numOutputRows'] AS BIGINT))"
        " FROM changes_history WHERE get_json_object(userMetadata, '$.cfp') = 'write')"
        " AS inserted,"
        " (SELECT max(version) FROM changes_history) AS latest,"
        " (SELECT max(CAST(get_json_object(userMetadata, '$.cfpChangesVersion') AS BIGINT))"
        " FROM state_history) AS applied"
    )
    [row] = remote_sql(cluster, query)
    assert row["inserted"] == len(feed.ids) and row["applied"] == row["latest"] > 0, row


def assert_the_change_log_carries_the_envelope(cluster: SparkCluster, feed: Feed) -> None:
    """The envelope's columns, through `cfp sql`'s `envelope` view (on the cluster's Spark)."""
    query = (
        "SELECT stream_name, read_method, op, count(DISTINCT uuid) AS ids,"
        " min(size(sort_keys)) AS keys, sum(CASE WHEN sort_keys[1] = get_json_object(payload,"
        " '$.data.sequencer') AND source_timestamp <= read_timestamp THEN 1 ELSE 0 END) AS agree,"
        " count(*) AS n FROM envelope GROUP BY stream_name, read_method, op ORDER BY op"
    )
    rows = remote_sql(cluster, query)
    assert [(r["stream_name"], r["read_method"], r["op"]) for r in rows] == [
        (cluster.processor, "change-feed", "delete"),
        (cluster.processor, "change-feed", "upsert"),
    ]
    assert sum(r["ids"] for r in rows) == len(feed.ids)
    assert all(r["keys"] == 3 and r["agree"] == r["n"] for r in rows)


# The kill and zombie cases run on the Spark Connect server only: the protocol they test (fenced
# appends, refused checkpoints) is the same with an embedded
# session, which test_delta_tables.py and the chaos suite (local Spark per host, kills and
# pauses) exercise; three embedded JVMs more on two cores would cost minutes of `make test`.
@pytest.fixture(scope="module")
def thin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv of the `[connect]` role, made from its lock: pyspark-client, no JVM."""
    python = virtualenv(tmp_path_factory.mktemp("thin") / "venv", "requirements-connect.lock")
    assert has_module(python, "pyspark.sql.connect")
    assert not has_module(python, "py4j") and not has_module(python, "pyspark.core")
    return python


def test_the_spark_connect_servers_jvm_maps_the_class_archive(spark_connect: str) -> None:
    archive, port = install_archive(), spark_connect.rsplit(":", 1)[1]
    (pid,) = jvm_pids("SparkConnectServer", f"spark.connect.grpc.binding.port={port}")
    assert maps_file(pid, archive), f"the server's JVM ({pid}) has not mapped {archive}"


async def test_a_thin_host_without_java_writes_through_the_server(
    thin: Path, feed: Feed, spark_connect: str, tmp_path: Path
) -> None:
    """The `[connect]` install, with only its virtualenv on PATH (no `java`): a host writes
    every event once through the server; without --spark-remote it says what it lacks."""
    embedded = await asyncio.to_thread(
        run_in, thin, feed.conn, "run", "--observer", "spark", "--output", str(tmp_path / "x")
    )
    assert embedded.returncode == 2, embedded.stderr[-2000:]
    assert "only the Spark Connect client (pyspark-client, no JVM)" in embedded.stderr

    output = tmp_path / "tables"
    run = await asyncio.to_thread(
        run_in, thin, feed.conn, "run", "--processor-name", "thin", "--until-caught-up",
        "--no-http", "--observer", "spark", "--spark-remote", spark_connect,
        "--output", str(output), "--spark-warm-up-rows", "0", "--state-interval", "3600",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    logged = [json.loads(line) for line in run.stderr.splitlines() if line[:1] == "{"]
    assert any(e.get("event") == "spark.committed" for e in logged)
    changes = DeltaTable(str(output / "changes"))
    found = QueryBuilder().register("changes", changes).execute("SELECT id FROM changes")
    assert Counter(pa.table(found).column("id").to_pylist()) == Counter(feed.ids)


async def test_a_host_killed_after_a_commit_before_its_checkpoints(
    cluster: SparkCluster, feed: Feed, request: pytest.FixtureRequest
) -> None:
    """h2 is alone at first: it holds every lease and the state job. Killed after a commit and
    before its checkpoints, its leases and the state job go to the other hosts once they expire
    (no host of its name comes back to claim them)."""
    cluster.start("h2", CFP_TEST_SPARK_PAUSE_AFTER_COMMIT_S="60")
    await cluster.logged("h2", "job.acquired")
    # h2 committed a Spark write to the change log and now waits before checkpointing it
    await cluster.logged("h2", "spark.committed")
    for name in ("h1", "h3"):
        cluster.start(name)
    for name in ("h1", "h3"):  # up and balancing (their Spark sessions open), h2 still paused
        await cluster.logged(name, "host.state", state="running")
    before = {name: len(cluster.log_events(name)) for name in ("h1", "h3")}
    cluster.signal("h2", signal.SIGKILL)
    at_kill = {name: await looks(cluster, name) for name in ("h1", "h3")}
    cluster.wait("h2")
    taken = await first_logged(cluster, ("h1", "h3"), "job.acquired")
    # the job's lease expires on the others' own clocks, then a job runner's next look at it:
    # within the expiry and a look, counted in the taker's looks (one every expiry / 3, at most
    # 20 % early, and one more at the expiry), leaving out looks the lease store failed
    failed = sum(
        1 for e in cluster.log_events(taken["host"])[before[taken["host"]] : taken["_line"]]
        if e.get("event") == "job.take_failed"
    )  # fmt: skip
    within = math.ceil(EXPIRY_S / (EXPIRY_S / 3 / 1.2)) + 2
    assert taken["look"] - at_kill[taken["host"]] - failed <= within, (at_kill, taken)
    await caught_up(cluster)
    codes = cluster.stop_all()
    assert codes["h1"] == codes["h3"] == 0, codes
    # what h2 committed and never checkpointed: its next owners asked the change log (the floor
    # after their fence) and delivered none of it again, so no write had any to leave out
    held = [
        e["held_already"]
        for name in ("h1", "h3")
        for e in cluster.log_events(name)
        if e.get("event") == "worker.stopped"
    ]
    assert sum(held) > 0, "the killed host's unconfirmed rows were delivered again"
    assert logged_rows(cluster, ("h1", "h3"), "spark.replay_skipped") == 0
    assert_exactly_once(cluster, feed, request)
    assert_state_equals_the_account(cluster)


async def first_logged(cluster: Cluster, names: tuple[str, ...], event: str) -> dict[str, Any]:
    """The first `event` any of `names` logged, with its host, once one has."""
    deadline = patience.deadline()
    while True:
        found = [
            {**e, "host": n}
            for n in names
            for e in cluster.log_events(n)
            if e.get("event") == event
        ]
        if found:
            return min(found, key=lambda e: str(e["timestamp"]))
        assert time.monotonic() < deadline, f"none of {names} logged {event}"
        await asyncio.sleep(0.05)


async def looks(cluster: Cluster, name: str) -> int:
    """How many looks host `name` has taken at the state job's lease while not holding it."""
    text = await asyncio.to_thread(get_text, f"{await cluster.endpoint(name)}/metrics")
    return round(metric(text, "cfp_job_looks_total"))


async def test_a_zombie_write_in_flight_across_the_fence_is_refused(
    cluster: SparkCluster, feed: Feed, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A host stopped while its write runs on the Spark Connect server (its Delta transaction
    open, held by the test); the next owner fences the leases and writes them; the held write
    then goes on and Delta refuses its commit, and the woken host says it was fenced. Its writes
    that start after the fence are skipped by Delta (the check after a sync finds it, or its
    checkpoints are refused): the change log is unchanged by any of them."""
    await assert_a_zombie_write_in_flight_is_refused(cluster, feed, tmp_path / "go", request)


async def test_a_host_stopped_with_a_write_stuck_in_spark_lets_go_within_its_drain_timeout(
    cluster: SparkCluster, feed: Feed, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """SIGTERM while h1's second write is held inside Spark: h1 waits for it no longer than
    `--drain-timeout`, releases every lease at its last checkpoint, and exits 0 by itself (no
    SIGKILL needed), naming what it left behind. The next host takes the leases released, and
    the change log holds each event once, whether the abandoned write commits or not."""
    flag = tmp_path / "go"
    try:
        await start_with_a_write_held(cluster, "h1", flag, "--drain-timeout", "3")
        cluster.signal("h1", signal.SIGTERM)
        code = await asyncio.to_thread(cluster.wait, "h1")
        async with cluster.store() as store:
            leases = await (await store.open()).list_leases()
    finally:
        flag.touch()  # the held write goes on; it commits, or the next owner's fence refuses it
    assert code == 0
    [cut] = [e for e in cluster.log_events("h1") if e.get("event") == "host.drain_cut"]
    assert "the observer's exit" in cut["left_behind"], cut
    assert leases and all(x.owner is None for x in leases), [(x.token, x.owner) for x in leases]
    cluster.start("h2", "--drain-timeout", "1")  # its own stop need not wait for the state job
    await took_everything(cluster, "h2")  # caught up: checkpointed, hence committed
    cluster.signal("h2", signal.SIGTERM)
    assert await asyncio.to_thread(cluster.wait, "h2") == 0
    assert_exactly_once(cluster, feed, request)


@pytest.mark.parametrize("copies", [3, 0], ids=["each-three-times", "every-one-dropped"])
async def test_hints_repeated_or_all_dropped_change_no_event_and_leave_nothing_provisional(
    cluster: SparkCluster, feed: Feed, request: pytest.FixtureRequest, copies: int
) -> None:
    """Two hosts with `--hints-queue`, the queue holding the Event Grid event of every feed
    record it has one for, each three times, ahead of the feed (or none: every hint dropped):
    the change log still holds each feed event once (hints never enter it), the hints table
    holds every copy, and once caught up the state equals the account (the feed alone brings
    it there) with no row left provisional."""
    queue = f"hints-{uuid.uuid4().hex[:12]}"
    records, _ = await read_all(feed.conn)
    events = [e for e in (grid_event(r) for r in records) if e is not None]
    async with connection.queue_client(feed.conn, queue) as q:
        await q.create_queue()
        await asyncio.gather(
            *(q.send_message(queue_text(e)) for e in events for _ in range(copies))
        )
    hints = ("--hints-queue", queue, "--no-history", "--hints-poll-interval", "0.2")
    for name in ("h1", "h2"):
        cluster.start(name, "--until-caught-up", *hints)
    assert {n: cluster.wait(n) for n in ("h1", "h2")} == {"h1": 0, "h2": 0}
    # the account's feed as it is now: earlier tests of the module may have added to it
    now = Feed(feed.conn, {str(r["id"]) for r in records if r["eventType"] != "Control"})
    assert_exactly_once(cluster, now, request)
    accepted = sum(
        e.get("delivered", 0)
        for n in ("h1", "h2")
        for e in cluster.log_events(n)
        if e.get("event") == "hints.stopped"
    )
    hinted = delta_rs_column(cluster, "id", cluster.output.hints)
    assert (accepted > 0) == (copies > 0), accepted
    assert accepted == sum(hinted.values()), (accepted, sum(hinted.values()))
    assert set(hinted) <= {e["id"] for e in events}
    done = run_cfp(cluster.conn, "verify", "--output", cluster.uri, "--json")
    doc = json.loads(done.stdout)
    assert (doc["equal"], doc["provisional"]) == (True, 0), done.stdout + done.stderr


# Last in the module: the live workload below changes the account the tests above share.
async def test_an_initial_scan_during_changes_ends_with_the_state_equal(
    cluster: SparkCluster, feed: Feed
) -> None:
    """The Spark observer runs without the barrier: feed events may reach the tables before a
    blob's backfill, and the state MERGE's sequencing (a backfill sorts below every change) must
    make the order irrelevant."""
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

                # as caught_up: generous, for several JVMs on two cores under `make test`
                await table.until(through_the_last_segment, what="the last segment")
            assert set(cluster.stop_all().values()) == {0}
        finally:
            stop.set()
            await asyncio.gather(live, return_exceptions=True)
    assert_state_equals_the_account(cluster)
    methods = delta_rs_column(cluster, "read_method")
    assert methods["backfill"] > 0 and methods["change-feed"] > 0
