"""`make image-test`: the deployment docs/deploy.md recommends for a fleet, every part in its own
container. Spark's standalone master and two workers (cfp:spark), `cfp spark-connect` in front
of them, three thin hosts (cfp:host, no Java) writing the Delta tables to Azurite's blob storage
(`abfs://`) through the server, and a Spark Connect client streaming `format("blobchangefeed")`
into a Delta table. Nothing is installed on a worker: the jars reach the executors from the
server (`spark.jars`), cfp's Python code is the image's own, at the path the server runs.

Which worker ran what comes from Spark's own event log, written by the server into a mounted
folder. The workers listen on loopback addresses of their own (127.0.0.2 and 127.0.0.3), so a
task's host names its worker."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from observers.builtin.spark.session.output import delta_rs_options, parse_output
from processor.connection import ENV_VAR, storage_access
from processor.emulator.azurite import ROOT, Azurite, free_port, wait_for_port
from tests import patience
from tests.helpers import Feed, emulate_afresh, until
from tests.image import spark_events
from tests.image.fleet import SPARK_IMAGE, Fleet

TABLES = "abfs://cfp-tables@devstoreaccount1.dfs.core.windows.net"
WORKERS = {"w1": "127.0.0.2", "w2": "127.0.0.3"}
CLUSTER_CONF = {
    **spark_events.EVENT_LOG_CONF,
    "spark.eventLog.dir": "file:/out/events",
    # one executor of one core on each worker, and no job before both have registered
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.executor.memory": "768m",
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
}

pytestmark = pytest.mark.timeout(900)  # a Spark cluster, its server and three hosts in containers


@dataclass
class Cluster:
    fleet: Fleet
    remote: str  # the Connect server's sc:// URL

    @property
    def events(self) -> Path:
        return self.fleet.out / "events"


@pytest.fixture(scope="module")
async def feed(azurite: Azurite) -> Feed:
    """Real blob operations (cfp verify lists the account) and their feed."""
    conn = azurite.connection_string
    records = await emulate_afresh(conn, seed=41, segments=3, events_per_segment=600, shards=(3, 4))
    return Feed(conn, {str(r["id"]) for r in records if r["eventType"] != "Control"})


@pytest.fixture(scope="module")
def cluster(feed: Feed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    fleet = Fleet(feed.conn, "cluster", tmp_path_factory.mktemp("cluster") / "out")
    # mounted at /out in each container, where the image's user (uid 10001) writes the event
    # log and the workers keep their work folders
    for folder in (fleet.out, *(fleet.out / name for name in ("events", *WORKERS))):
        folder.mkdir(parents=True)
        folder.chmod(0o777)
    try:
        yield Cluster(fleet, start_cluster(fleet))
    finally:
        fleet.remove_all()


def start_cluster(fleet: Fleet) -> str:
    """Master, two workers, the Connect server; its URL once both executors have registered
    (the server opens its port only then: minRegisteredResourcesRatio)."""
    master = free_port()
    spark = {"image": SPARK_IMAGE, "entrypoint": "spark-class"}
    fleet.launch(
        "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
        "--port", str(master), "--webui-port", str(free_port()),
        env={"SPARK_LOCAL_IP": "127.0.0.1"}, **spark,
    )  # fmt: skip
    wait_for_port(master, timeout_s=patience.left_s())
    for name, address in WORKERS.items():
        fleet.launch(
            name, "org.apache.spark.deploy.worker.Worker", "--host", address, "--cores", "1",
            "--memory", "1g", "--work-dir", f"/out/{name}", "--webui-port", str(free_port()),
            f"spark://127.0.0.1:{master}", env={"SPARK_LOCAL_IP": address}, **spark,
        )  # fmt: skip
    port = free_port()
    conf = [a for k, v in CLUSTER_CONF.items() for a in ("--spark-conf", f"{k}={v}")]
    fleet.launch(
        "spark", "spark-connect", "--port", str(port), "--spark-master",
        f"spark://127.0.0.1:{master}", *conf, env={}, image=SPARK_IMAGE,
    )  # fmt: skip
    wait_for_port(port, timeout_s=patience.left_s())
    return f"sc://127.0.0.1:{port}"


def start_hosts(
    cluster: Cluster, processor: str, output: str, *extra: str, expiry_s: int = 10
) -> list[str]:
    names = [f"{processor}-h{n}" for n in (1, 2, 3)]
    for name in names:
        cluster.fleet.launch(
            name, "run", "--processor-name", processor, "--until-caught-up",
            "--spark-remote", cluster.remote, "--output", output, "--spark-warm-up-rows", "0",
            "--lease-expiration", str(expiry_s), *extra,
            env={"CFP_HOST_NAME": name, "CFP_HTTP_PORT": str(free_port())},
        )  # fmt: skip
    return names


def change_log_ids(conn: str, output: str) -> Counter[str]:
    """The change log's ids as the `deltalake` package reads them from Azurite."""
    where = parse_output(output)
    options = delta_rs_options(where, storage_access(conn))
    return delta_ids(where.changes, options)


def delta_ids(uri: str, options: dict[str, str] | None) -> Counter[str]:
    table = DeltaTable(uri, storage_options=options or None)
    found = QueryBuilder().register("t", table).execute("SELECT id FROM t")
    return Counter(pa.table(found).column("id").to_pylist())


def assert_hosts_wrote(cluster: Cluster, names: list[str]) -> dict[str, list[dict[str, object]]]:
    """Each host ended well and took leases, and they committed; what each logged."""
    logged = {}
    for name in names:
        assert cluster.fleet.wait(name) == 0, cluster.fleet.logs(name)[-3000:]
        logged[name] = list(cluster.fleet.log_events(name))
        assert any(e.get("event") == "lease.acquired" for e in logged[name]), name
    commits = [
        e for events in logged.values() for e in events if e.get("event") == "spark.committed"
    ]
    assert commits, "no host committed"
    return logged


def report(logged: dict[str, list[dict[str, object]]]) -> str:
    """What the hosts logged, a line each: how many of each lease and Spark event, the slowest
    write, and every warning or error."""
    lines = []
    for name, events in logged.items():
        kinds = Counter(str(e.get("event")) for e in events)
        shown = {k: n for k, n in sorted(kinds.items()) if k.startswith(("lease.", "spark."))}
        slowest = max((float(str(e["seconds"])) for e in events
                       if e.get("event") == "spark.committed"), default=0.0)  # fmt: skip
        bad = [f"{e.get('level')} {e.get('event')}" for e in events
               if e.get("level") in ("warning", "error")]  # fmt: skip
        lines.append(f"{name}: {shown}; slowest write {slowest:.1f} s; warnings/errors: {bad}")
    return "\n".join(lines)


def assert_every_event_once(cluster: Cluster, feed: Feed, output: str) -> Counter[str]:
    ids = change_log_ids(feed.conn, output)
    assert set(ids) == feed.ids, f"{len(feed.ids - set(ids))} events missing"
    assert not [i for i, n in ids.items() if n > 1], "events twice in the change log"
    done = cluster.fleet.run("verify", "verify", "--output", output, image=SPARK_IMAGE)
    assert "EQUAL: every blob matches" in done, done
    return ids


def stream(cluster: Cluster, conn: str, root: str) -> subprocess.CompletedProcess[str]:
    """A Spark Connect client (this process's PySpark) running the source into a Delta table
    with AvailableNow, table and checkpoint in Azurite."""
    return subprocess.run(
        [sys.executable, "-m", "tests.stream_query", f"{root}/checkpoint", f"{root}/table",
         "--available-now", "--remote", cluster.remote, "--option", f"connectionString={conn}"],
        cwd=ROOT, capture_output=True, text=True, timeout=patience.left_s(),
        env={"PATH": "/usr/bin:/bin", ENV_VAR: conn},
    )  # fmt: skip


async def test_three_thin_hosts_and_a_stream_on_a_standalone_cluster(
    cluster: Cluster, feed: Feed
) -> None:
    output = f"{TABLES}/cluster"
    names = start_hosts(cluster, "cluster", output)
    assert_hosts_wrote(cluster, names)
    ids = assert_every_event_once(cluster, feed, output)

    streamed = await asyncio.to_thread(stream, cluster, feed.conn, f"{TABLES}/stream")
    assert streamed.returncode == 0, streamed.stdout[-2000:] + streamed.stderr[-3000:]
    where = parse_output(f"{TABLES}/stream")
    table = delta_ids(f"{TABLES}/stream/table", delta_rs_options(where, storage_access(feed.conn)))
    assert set(table) == set(ids)

    per_host = spark_events.succeeded_per_host(spark_events.read(cluster.events))
    assert set(per_host) == set(WORKERS.values()), per_host  # tasks on both workers, no other


async def test_a_worker_killed_while_the_hosts_write_loses_and_repeats_nothing(
    cluster: Cluster, feed: Feed
) -> None:
    """SIGKILL to one worker's container while tasks of the hosts' writes run on it: Spark runs
    them again on the other worker; no host loses a lease for it; every event once.

    The leases expire after 30 s, so a hand-over is forced only after 60 s: the writes the lost
    tasks held up end well before (with 10 s, a write queued behind the rerun tasks once
    outlasted the 20 s a requester then waited, and the lease was taken by force, as it should
    be then)."""
    output = f"{TABLES}/lost-worker"
    names = start_hosts(cluster, "lostworker", output, "--spark-max-rows", "200", expiry_s=30)
    victim, work = WORKERS["w2"], cluster.fleet.out / "w2"

    async def caught_running() -> bool:
        """A task of theirs runs on w2, and is held still there (a task seen running could
        end before the kill lands: then nothing would fail)."""
        if spark_events.running_in(work) == 0:
            return False
        cluster.fleet.freeze("w2")
        if spark_events.running_in(work) > 0:
            return True
        cluster.fleet.thaw("w2")
        return False

    await until(caught_running, "a task held running on w2", every_s=0.02)
    cluster.fleet.kill("w2")
    logged = assert_hosts_wrote(cluster, names)
    print(f"\nthe hosts, w2 killed while a task ran on it:\n{report(logged)}")
    lost = [e for events in logged.values() for e in events if e.get("event") == "lease.lost"]
    assert not lost, report(logged)
    assert_every_event_once(cluster, feed, output)

    events = spark_events.read(cluster.events)
    on_w2 = [e for e, host in spark_events.executor_hosts(events).items() if host == victim]
    assert on_w2 and set(on_w2) <= set(spark_events.executors_removed(events)), on_w2
    tasks = spark_events.tasks(events)
    failed = {(t.stage, t.partition) for t in tasks if t.host == victim and t.reason != "Success"}
    again = {
        (t.stage, t.partition) for t in tasks if t.host == WORKERS["w1"] and t.reason == "Success"
    }
    assert failed and failed <= again, (failed, again)
