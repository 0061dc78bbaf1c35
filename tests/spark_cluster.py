"""What the Spark host tests share (`test_spark.py`, `test_delta_tables.py`): the module's feed, a
cluster of `cfp run --observer spark` hosts writing the Delta tables, and the checks on them:
Spark and the `deltalake` package each read every event exactly once from the change log, and
`cfp verify` finds the state equal to the live listing."""

from __future__ import annotations

import contextlib
import itertools
import signal
import subprocess
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob.aio import BlobServiceClient
from deltalake import DeltaTable, QueryBuilder

from observers.builtin.spark.session.output import Output, delta_rs_options, parse_output
from observers.builtin.spark.session.session import SparkOptions, prepare
from processor.connection import storage_access
from processor.emulator.azurite import Azurite
from tests.cluster import Cluster, Table, all_caught_up, owners
from tests.connect_servers import ConnectServer
from tests.helpers import Feed, emulate_afresh, json_lines, run_cfp, until

_processors = itertools.count()
TABLES_CONTAINER = "cfp-tables"  # in the monitored account: left out of the feed and of verify
# long enough that a Spark host's loop, starved beside several JVMs on two cores, still renews in
# time: every lease lost that way is a replay, more Spark writes, and more load
EXPIRY_S = 6.0


@contextlib.asynccontextmanager
async def tables_feed(azurite: Azurite, **shape: Any) -> AsyncIterator[Feed]:
    """A feed emulated afresh (`shape`: `emulate_afresh`'s), for the processors of a module;
    afterwards the tables' container goes too: the account is shared with other modules, which
    compare its listing with its feed."""
    conn = azurite.connection_string
    records = await emulate_afresh(conn, **shape)
    yield Feed(conn, {str(r["id"]) for r in records if r["eventType"] != "Control"})
    async with BlobServiceClient.from_connection_string(conn) as service:
        with contextlib.suppress(ResourceNotFoundError):
            await service.delete_container(TABLES_CONTAINER)


@pytest.fixture(scope="module")
async def feed(azurite: Azurite) -> AsyncIterator[Feed]:
    """The module's feed: 1,500 events."""
    async with tables_feed(
        azurite, seed=21, segments=3, events_per_segment=500, shards=(4, 6, 4)
    ) as made:
        yield made


class SparkCluster(Cluster):
    output: Output
    remote: str | None  # the Spark Connect server's sc:// URL; None: embedded sessions

    @property
    def uri(self) -> str:
        return self.output.uri


@contextlib.asynccontextmanager
async def spark_cluster(
    feed: Feed, tmp_path: Path, remote: str | None
) -> AsyncIterator[SparkCluster]:
    """Hosts on the Spark Connect server at `remote`, writing into Azurite's blob storage
    through ABFS; or (`remote` None) each with an embedded `local[1]` Spark, writing into a
    local folder."""
    processor = f"spark{next(_processors)}"
    if remote is None:
        spark = ["--spark-master", "local[1]"]
        output = parse_output(str(tmp_path / "tables"))
    else:
        spark = ["--spark-remote", remote]
        output = parse_output(
            f"abfs://{TABLES_CONTAINER}@devstoreaccount1.dfs.core.windows.net/{processor}"
        )
    args = (
        "--lease-expiration", str(EXPIRY_S),
        "--poll-interval", "0.5",
        "--observer", "spark",
        "--output", output.uri,
        "--spark-warm-up-rows", "0",
        # runs when taken, on drain and at the end: enough here; each run is a Spark job that
        # competes with the writes
        "--state-interval", "120",
        # a stop must not cut the state job's last run short: one cut between the state's
        # commit and the history's leaves the history behind until a next run, which tests
        # that stop every host never get (most likely what CI once showed under load, with the
        # default 90 s: the history behind the state once every host had stopped)
        "--drain-timeout", "400",
        *spark,
    )  # fmt: skip
    c = SparkCluster(feed.conn, processor, tmp_path, args=args)
    c.output = output
    c.remote = remote
    try:
        yield c
    finally:
        c.kill_all()


def delta_rs_column(cluster: SparkCluster, column: str, uri: str | None = None) -> Counter[str]:
    """The values of a change log column (or of the table at `uri`) as the `deltalake`
    package (delta-rs) reads them."""
    options = delta_rs_options(cluster.output, storage_access(cluster.conn))
    table = DeltaTable(uri or cluster.output.changes, storage_options=options or None)
    found = QueryBuilder().register("changes", table).execute(f"SELECT {column} FROM changes")
    return Counter(pa.table(found).column(column).cast(pa.string()).to_pylist())


def delta_rs_ids(cluster: SparkCluster) -> Counter[str]:
    return delta_rs_column(cluster, "id")


def remote_sql(cluster: SparkCluster, query: str) -> list[dict[str, Any]]:
    """The rows of `cfp sql --json QUERY` on the cluster's Spark Connect server."""
    assert cluster.remote is not None, "cfp sql here runs on the cluster's Spark Connect server"
    done = run_cfp(
        cluster.conn, "sql", "--output", cluster.uri, "--spark-remote", cluster.remote, "--json",
        "--limit", "1000000", query,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json_lines(done.stdout)


def spark_ids(cluster: SparkCluster, request: pytest.FixtureRequest) -> Counter[str]:
    """The change log's ids as Spark reads them: on the cluster's Spark Connect server through
    `cfp sql` (a remote session in the tests' process would leave PySpark's
    `SPARK_CONNECT_MODE_ENABLED` set, and every embedded session the worker opens after it would
    then refuse to start), or in the tests' own embedded session for a local folder."""
    if cluster.remote is not None:
        return Counter(str(row["id"]) for row in remote_sql(cluster, "SELECT id FROM changes"))
    session = request.getfixturevalue("delta_spark")
    prepare(session, SparkOptions(cluster.output, access=storage_access(cluster.conn)))
    rows = session.read.format("delta").load(cluster.output.changes).select("id").toArrow()
    return Counter(rows.column("id").to_pylist())


async def caught_up(cluster: Cluster) -> Table:
    async with cluster.store() as store:
        table = Table(await store.open())
        # generous: several JVMs share two cores under `make test`, where a Delta commit has
        # taken 80 s (a correctness test, not a speed test: bench/ measures speed)
        await table.until(all_caught_up, what="every lease caught up")
        return table


def assert_exactly_once(cluster: SparkCluster, feed: Feed, request: pytest.FixtureRequest) -> None:
    for reader, ids in (
        ("deltalake", delta_rs_ids(cluster)),
        ("spark", spark_ids(cluster, request)),
    ):
        assert set(ids) == feed.ids, f"{reader}: {len(feed.ids - set(ids))} missing"
        twice = [i for i, n in ids.items() if n > 1]
        assert not twice, f"{reader}: {len(twice)} ids twice in the change log"


def verify(cluster: SparkCluster) -> subprocess.CompletedProcess[str]:
    return run_cfp(cluster.conn, "verify", "--output", cluster.uri)


def assert_state_equals_the_account(cluster: SparkCluster) -> None:
    """`cfp verify` says EQUAL for the state, and for the history's versions."""
    done = verify(cluster)
    assert done.returncode == 0 and "EQUAL: every blob" in done.stdout, done.stdout + done.stderr
    assert "EQUAL: each blob's versions lead to its state row" in done.stdout, done.stdout


def logged_rows(cluster: Cluster, names: tuple[str, ...], event: str) -> int:
    return sum(
        e.get("rows", 0) for n in names for e in cluster.log_events(n) if e.get("event") == event
    )


async def assert_verify_finds_a_change_the_feed_lacks(cluster: SparkCluster, feed: Feed) -> str:
    """`cfp verify` exits 1 naming a blob written without the feed; returns its output."""
    async with BlobServiceClient.from_connection_string(feed.conn) as service:
        extra = service.get_blob_client("cfp-emu-0", "written/without/the/feed.txt")
        await extra.upload_blob(b"x")  # a change the feed does not explain
        try:
            done = verify(cluster)
        finally:
            await extra.delete_blob()
    assert done.returncode == 1, done.stdout
    assert "cfp-emu-0/written/without/the/feed.txt: missing from the state" in done.stdout
    return done.stdout


@contextlib.contextmanager
def spark_connect_server(
    logs: Path,
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    lasting: bool = False,
) -> Iterator[str]:
    """`cfp spark-connect` on a free loopback port (`conf`: more --spark-conf), its log in
    `logs`; its sc:// URL. Stopped with SIGTERM, which must exit 0. `lasting`: it serves a
    whole file of tests (its JVM compiles with C2 too: `tests.jvms.lasting_jvm`)."""
    server = ConnectServer(logs, master=master, conf=conf, lasting=lasting)
    server.start()
    try:
        yield server.url
    finally:
        assert server.stop() == 0, server.out()


async def took_everything(cluster: SparkCluster, host: str) -> None:
    """Until `host` owns every lease and they are caught up."""
    async with cluster.store() as store:
        table = Table(await store.open())
        await table.until(
            lambda leases: all_caught_up(leases) and set(owners(leases)) == {host},
            what=f"{host} owns every lease and caught up",
        )


async def start_with_a_write_held(
    cluster: SparkCluster, name: str, flag: Path, *extra: str, max_rows: int = 500
) -> None:
    """Start host `name` with its second Spark write held inside Spark (its Delta transaction
    open) until `flag` exists; return once it is held. The caller touches `flag` in the end,
    whatever happens, or the write holds a task slot of the server for good."""
    rows = ("--spark-max-rows", str(max_rows))
    cluster.start(name, *rows, *extra, CFP_TEST_SPARK_HOLD_WRITE_FILE=str(flag))
    held = Path(f"{flag}.held")

    async def is_held() -> bool:
        return held.exists()

    await until(is_held, f"{name}'s second write held inside Spark")


async def assert_a_zombie_write_in_flight_is_refused(
    cluster: SparkCluster, feed: Feed, flag: Path, request: pytest.FixtureRequest
) -> None:
    """h1's second write is held inside Spark (its Delta transaction open) until `flag` exists,
    and h1 stopped with SIGSTOP; h2 takes every lease, fences them and writes them; then the held
    write goes on to its commit, which Delta refuses, and h1, woken, logs `spark.fenced`. The
    change log is unchanged by it, and holds each event once."""
    try:
        await start_with_a_write_held(cluster, "h1", flag)
        cluster.signal("h1", signal.SIGSTOP)
        cluster.start("h2")
        await took_everything(cluster, "h2")
        before = delta_rs_ids(cluster)
    finally:
        flag.touch()  # the held write goes on to its commit
    cluster.signal("h1", signal.SIGCONT)

    async def refused_in_flight() -> bool:  # (its writes that started later are skipped)
        return any(
            e.get("event") == "spark.fenced" and "while it was in flight" in e.get("error", "")
            for e in cluster.log_events("h1")
        )

    await until(refused_in_flight, "h1 logs spark.fenced for its write held in flight")
    assert delta_rs_ids(cluster) == before, "the zombie's write changed the change log"
    assert set(cluster.stop_all().values()) == {0}
    assert_exactly_once(cluster, feed, request)
