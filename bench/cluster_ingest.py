"""Thin hosts on a Spark standalone cluster, against a bare append of the same rows on it.

    python -m bench.cluster_ingest [--segments 3] [--events-per-segment 20000]

Starts a dedicated Azurite, emulates a feed (cached in .bench/cluster_ingest/), Spark's own
standalone master and two workers (one core and one executor each, on 127.0.0.2 and 127.0.0.3;
`spark-class` of the development install's PySpark), and `cfp spark-connect --spark-master
spark://...` in front of them. Then, in one run:

  (n)  n = 1, 2 and 3 thin hosts (a virtualenv of the `[connect]` role: pyspark-client, no JVM)
       of one processor writing a fresh change log through the server, `--until-caught-up`:
       events/s from the first host's start until the last one is caught up, and warm (the
       events after the first commit, over the time from it);
  (b)  baseline: the same rows, read back from the 1-host change log as one Arrow table and
       appended to a fresh Delta table through the same server by a Connect session of this process,
       in one commit (best of 3); sent in the hosts' pieces of 32 MB
       (`observers/builtin/spark/arrow_to_spark.py`: one local relation of them all makes tasks
       too big for the cluster's RPC).

The tables are local folders (the workers are processes of this machine). Only the ratios mean
anything on a shared machine; the cluster and the hosts share its cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from bench.spark_ingest import log_time, read_back
from observers.builtin.spark.arrow_to_spark import to_frame
from observers.builtin.spark.session.output import parse_output
from processor.emulator.azurite import ROOT, Azurite, free_port, wait_for_port
from tests.helpers import emulate_afresh
from tests.spark_cluster import spark_connect_server
from tests.venvs import virtualenv

WORKDIR = ROOT / ".bench" / "cluster_ingest"
WORKERS = ("127.0.0.2", "127.0.0.3")
CLUSTER_CONF = {
    # the baseline's append of every row passes through the driver (2g ran out of memory with
    # 180,000 rows, whose local relation the driver holds while its tasks carry it)
    "spark.driver.memory": "4g",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.executor.memory": "1g",
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
}


@contextlib.contextmanager
def standalone_cluster() -> Iterator[str]:
    """Spark's master and two workers as processes; the master's URL."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, address: str, *argv: str) -> None:
        log = (WORKDIR / f"{name}.log").open("wb")
        env = {**os.environ, "SPARK_LOCAL_IP": address, "PYSPARK_PYTHON": sys.executable}
        procs.append(subprocess.Popen(
            [str(spark_class), *argv], env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        ))  # fmt: skip

    try:
        start("master", "127.0.0.1", "org.apache.spark.deploy.master.Master", "--host",
              "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()))  # fmt: skip
        wait_for_port(port, timeout_s=120)
        for n, address in enumerate(WORKERS, 1):
            work = WORKDIR / f"w{n}"
            shutil.rmtree(work, ignore_errors=True)
            start(f"w{n}", address, "org.apache.spark.deploy.worker.Worker", "--host", address,
                  "--cores", "1", "--memory", "2g", "--work-dir", str(work),
                  "--webui-port", str(free_port()), f"spark://127.0.0.1:{port}")  # fmt: skip
        yield f"spark://127.0.0.1:{port}"
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)


def hosts(python: Path, conn: str, remote: str, n: int, output: Path) -> tuple[float, float, int]:
    """`n` thin hosts of one processor until caught up: seconds from the first one's start to
    the last one caught up; the same from the first commit; the rows written after it."""
    processor = f"cluster{n}x{int(time.time())}"
    env = {"PATH": str(python.parent), "CFP_CONNECTION_STRING": conn, "CFP_LOG_JSON": "1"}
    logs = [WORKDIR / f"{processor}-h{i}.log" for i in range(n)]
    spawned = time.time()
    command = [
        str(python), "-m", "processor", "run", "--processor-name", processor,
        "--lease-table", "cfpbenchcluster", "--no-http", "--until-caught-up",
        "--observer", "spark", "--spark-remote", remote, "--output", str(output),
        "--spark-warm-up-rows", "0", "--state-interval", "3600", "--lease-expiration", "10",
        "--max-batch-events", "1000",
    ]  # fmt: skip
    procs = [
        subprocess.Popen(
            [*command, "--host-name", f"h{i}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
        )
        for i, log in enumerate(logs)
    ]
    for i, proc in enumerate(procs):
        if proc.wait() != 0:
            raise SystemExit(f"host h{i} failed: see {logs[i]}")
    events = [
        json.loads(line)
        for log in logs
        for line in log.read_text().splitlines()
        if line.startswith("{")
    ]
    commits = sorted(
        (log_time(e), int(str(e.get("appended", 0))))
        for e in events
        if e.get("event") == "spark.committed"
    )
    done = max(log_time(e) for e in events if e.get("event") == "processor.caught_up")
    return done - spawned, done - commits[0][0], sum(rows for _, rows in commits[1:])


def baseline(remote: str, table: pa.Table) -> float:
    """Best seconds of three appends of `table` to fresh Delta tables through the server."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(remote).getOrCreate()
    best = float("inf")
    for n in range(3):
        target = WORKDIR / f"baseline{n}"
        shutil.rmtree(target, ignore_errors=True)
        started = time.perf_counter()
        to_frame(spark, table).write.format("delta").save(str(target))
        best = min(best, time.perf_counter() - started)
    return best


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=3)
    parser.add_argument("--events-per-segment", type=int, default=20_000)
    args = parser.parse_args()
    WORKDIR.mkdir(parents=True, exist_ok=True)
    python = virtualenv(WORKDIR / "venv-connect", "requirements-connect.lock")
    azurite = Azurite(WORKDIR / "azurite").start()
    results: dict[int, tuple[float, float, int]] = {}
    try:
        conn = azurite.connection_string
        await emulate_afresh(
            conn, seed=5, segments=args.segments, events_per_segment=args.events_per_segment,
            feed_only=True,
        )  # fmt: skip
        logs = WORKDIR / "spark-connect"
        shutil.rmtree(logs, ignore_errors=True)
        logs.mkdir()
        with (
            standalone_cluster() as master,
            spark_connect_server(logs, master=master, conf=CLUSTER_CONF) as remote,
        ):
            hosts(python, conn, remote, 1, WORKDIR / "warm")  # the server's JVM warmed up
            for n in (1, 2, 3):
                shutil.rmtree(WORKDIR / f"out{n}", ignore_errors=True)
                results[n] = hosts(python, conn, remote, n, WORKDIR / f"out{n}")
            table = read_back(parse_output(str(WORKDIR / "out1")).changes)
            base_s = baseline(remote, table)
    finally:
        azurite.stop()
    rows = DeltaTable(parse_output(str(WORKDIR / "out1")).changes).count()
    base = table.num_rows / base_s
    print(f"cluster_ingest: {rows:,} events; Spark standalone, 2 workers x 1 core, via Connect")
    print(f"(b) baseline: append to Delta through the server {base:>9,.0f} events/s (best of 3)")
    for n, (span_s, warm_s, warm_rows) in results.items():
        rate, warm = rows / span_s, warm_rows / warm_s
        print(
            f"({n}) {n} thin host{'s' if n > 1 else ' '}: {rate:>9,.0f} events/s from the start "
            f"({span_s:.1f} s), {rate / base:.2f}x (b); warm {warm:>9,.0f} events/s, "
            f"{warm / base:.2f}x (b)"
        )


if __name__ == "__main__":
    asyncio.run(main())
