"""One host reading the feed into local Spark, against writing the same rows from a ready table.

    python -m bench.spark_ingest [--events-per-segment 60000] [--segments 3] [--master local[2]]

Starts a dedicated Azurite, emulates a feed (cached in .bench/spark_ingest/ between runs) and:

  (a) ours       one `cfp run --observer spark --until-caught-up` host: reading the shards,
                 decoding, Arrow conversion, Spark writes, publishing and checkpoints; timed from
                 the host's start (its Spark session already open) to its exit;
  (b) baseline   the same rows, read back from (a)'s change log as one ready `pyarrow.Table`,
                 written with `spark.createDataFrame(table).write.parquet(...)` in a warm local
                 session with the same master.

Prints events/s of both and their ratio (target >= 0.5). Only the ratio means anything on a
shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pyarrow.dataset as ds

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from processor.changefeed.emulator.azurite import Azurite  # noqa: E402
from tests.helpers import emulate_afresh  # noqa: E402

WORKDIR = ROOT / ".bench" / "spark_ingest"


async def build_feed(conn: str, args: argparse.Namespace) -> None:
    marker = WORKDIR / "azurite" / f"feed-{args.segments}x{args.events_per_segment}.done"
    if marker.exists():
        return
    for other in marker.parent.glob("feed-*.done"):  # the account is emptied first
        other.unlink()
    await emulate_afresh(
        conn, seed=5, segments=args.segments, events_per_segment=args.events_per_segment
    )
    marker.touch()


def log_time(line: str) -> float:
    return datetime.fromisoformat(json.loads(line)["timestamp"]).timestamp()


def run_host(conn: str, output: Path, master: str) -> tuple[float, str]:
    env = {**os.environ, "CFP_CONNECTION_STRING": conn, "CFP_LOG_JSON": "1", "CFP_HTTP_PORT": "0"}
    command = [
        sys.executable, "-m", "processor", "run",
        "--processor-name", f"bench{int(time.time())}",
        "--lease-table", "cfpbenchleases",
        "--observer", "spark", "--output", str(output), "--spark-master", master,
        "--until-caught-up", "--lease-expiration", "3",
        "--max-batch-events", "1000",
    ]  # fmt: skip
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() + proc.stderr.splitlines() if ln.startswith("{")]
    (WORKDIR / "host.log").write_text("\n".join(lines) + "\n")
    if proc.returncode != 0:
        raise SystemExit(f"host failed ({proc.returncode}):\n" + "\n".join(lines[-20:]))
    started = next(log_time(ln) for ln in lines if '"host.starting"' in ln)
    stopped = next(log_time(ln) for ln in lines if '"host.stopped"' in ln)
    writes = [json.loads(ln) for ln in lines if '"spark.published"' in ln]
    detail = f"{len(writes)} writes"
    return stopped - started, detail


def baseline(changes: Path, out: Path, master: str) -> tuple[int, float]:
    from pyspark.sql import SparkSession

    table = ds.dataset(changes, format="parquet", partitioning="hive").to_table()
    table = table.drop_columns(["lease"])
    spark = (
        SparkSession.builder.master(master)
        .config("spark.driver.memory", "4g")  # the whole table is one createDataFrame
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark.createDataFrame(table.slice(0, 1000)).write.mode("overwrite").parquet(str(out))
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            spark.createDataFrame(table).write.mode("overwrite").parquet(str(out))
            best = min(best, time.perf_counter() - started)
        return table.num_rows, best
    finally:
        spark.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=3)
    parser.add_argument("--events-per-segment", type=int, default=60_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    WORKDIR.mkdir(parents=True, exist_ok=True)
    azurite = Azurite(WORKDIR / "azurite").start()
    try:
        conn = azurite.connection_string
        await build_feed(conn, args)
        output = WORKDIR / "out"
        shutil.rmtree(output, ignore_errors=True)
        seconds, detail = run_host(conn, output, args.master)
        rows = ds.dataset(output / "changes", partitioning="hive").count_rows()
        base_rows, base_seconds = baseline(output / "changes", WORKDIR / "baseline", args.master)
    finally:
        azurite.stop()
    assert rows == base_rows
    ours, base = rows / seconds, base_rows / base_seconds
    print(f"spark_ingest: {rows:,} events, master {args.master}")
    print(f"(a) ours: feed to change log  {ours:>9,.0f} events/s  ({seconds:.1f} s, {detail})")
    print(f"(b) baseline: table to parquet {base:>9,.0f} events/s  (best of 3)")
    print(f"    ours / baseline = {ours / base:.2f}x  (target >= 0.5)")


if __name__ == "__main__":
    asyncio.run(main())
