"""One host reading the feed into the Delta change log, against appending the same rows ready-made.

    python -m bench.spark_ingest [--events-per-segment 60000] [--segments 3] [--master local[2]]

Starts a dedicated Azurite, emulates a feed (cached in .bench/spark_ingest/ between runs) and:

  (a) ours       one `cfp run --observer spark --until-caught-up` host with an embedded session
                 and a local --output: reading the shards, decoding, Arrow conversion, the
                 change log's MERGEs (insert-if-absent) and the checkpoints; timed from the host's
                 start (its Spark session opened, the tables made) until every lease is
                 caught up. The state job runs once at the start and not again (--state-interval
                 one hour): this measures the change log.
  (b) baseline   the same rows, read back from (a)'s change log as one ready `pyarrow.Table`,
                 appended to a fresh Delta table with `spark.createDataFrame(table)` in a warm
                 session with the same master and settings (best of 3).

Prints events/s of both and their ratio (target >= 0.5). Only the ratio means anything on a
shared machine. `ingest_rate` is also what `bench/state_merge.py` compares the state job with.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from observers.changes import CHANGES_SCHEMA
from observers.spark.output import parse_output
from observers.spark.session import SparkOptions, open_session
from processor.emulator.azurite import Azurite
from tests.helpers import emulate_afresh

ROOT = Path(__file__).resolve().parent.parent
WORKDIR = ROOT / ".bench" / "spark_ingest"


async def build_feed(conn: str, segments: int, events_per_segment: int) -> None:
    marker = WORKDIR / "azurite" / f"feed-only-{segments}x{events_per_segment}.done"
    if marker.exists():
        return
    for other in marker.parent.glob("feed-*.done"):  # the account is emptied first
        other.unlink()
    await emulate_afresh(  # the host never looks at the blobs: the feed alone, 4x sooner
        conn, seed=5, segments=segments, events_per_segment=events_per_segment, feed_only=True
    )
    marker.touch()


def log_time(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["timestamp"])).timestamp()


def run_host(conn: str, output: Path, master: str) -> tuple[float, str]:
    """Seconds from the host's start to every lease caught up, and what it did."""
    env = {**os.environ, "CFP_CONNECTION_STRING": conn, "CFP_LOG_JSON": "1", "CFP_HTTP_PORT": "0"}
    command = [
        sys.executable, "-m", "processor", "run",
        "--processor-name", f"bench{int(time.time())}",
        "--lease-table", "cfpbenchleases",
        "--observer", "spark", "--output", str(output), "--spark-master", master,
        "--until-caught-up", "--lease-expiration", "3", "--state-interval", "3600",
        "--max-batch-events", "1000",
    ]  # fmt: skip
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() + proc.stderr.splitlines() if ln.startswith("{")]
    (WORKDIR / "host.log").write_text("\n".join(lines) + "\n")
    if proc.returncode != 0:
        raise SystemExit(f"host failed ({proc.returncode}):\n" + "\n".join(lines[-20:]))
    events = [json.loads(ln) for ln in lines]
    started = next(log_time(e) for e in events if e.get("event") == "host.starting")
    done = next(log_time(e) for e in events if e.get("event") == "processor.caught_up")
    writes = [e for e in events if e.get("event") == "spark.committed"]
    spark_s = sum(float(e.get("spark_s", 0)) for e in writes)
    return done - started, f"{len(writes)} commits, {spark_s:.1f} s in Spark"


def read_back(uri: str) -> pa.Table:
    """The change log as delta-rs reads it, in the schema the hosts write (delta-rs gives
    string views, which Spark's Arrow conversion refuses)."""
    found = QueryBuilder().register("changes", DeltaTable(uri)).execute("SELECT * FROM changes")
    return pa.table(found).select(CHANGES_SCHEMA.names).cast(CHANGES_SCHEMA)


def baseline(table: pa.Table, master: str) -> float:
    """Best seconds of three appends of `table` to a fresh Delta table."""
    spark = open_session(SparkOptions(parse_output("/unused"), master=master, app_name="baseline"))
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory(dir=WORKDIR) as folder:
            warm = f"{folder}/warm"
            spark.createDataFrame(table.slice(0, 1000)).write.format("delta").save(warm)
            best = float("inf")
            for n in range(3):
                started = time.perf_counter()
                spark.createDataFrame(table).write.format("delta").save(f"{folder}/t{n}")
                best = min(best, time.perf_counter() - started)
        return best
    finally:
        spark.stop()


async def ingest_rate(
    master: str, *, segments: int = 3, events_per_segment: int = 60_000
) -> tuple[int, float, str]:
    """(a): events written, seconds, and what the host did."""
    WORKDIR.mkdir(parents=True, exist_ok=True)
    azurite = Azurite(WORKDIR / "azurite").start()
    try:
        conn = azurite.connection_string
        await build_feed(conn, segments, events_per_segment)
        output = WORKDIR / "out"
        shutil.rmtree(output, ignore_errors=True)
        seconds, detail = run_host(conn, output, master)
    finally:
        azurite.stop()
    rows = read_back(parse_output(str(output)).changes).num_rows
    return rows, seconds, detail


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=3)
    parser.add_argument("--events-per-segment", type=int, default=60_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    rows, seconds, detail = await ingest_rate(
        args.master, segments=args.segments, events_per_segment=args.events_per_segment
    )
    table = read_back(parse_output(str(WORKDIR / "out")).changes)
    base_seconds = baseline(table, args.master)
    ours, base = rows / seconds, table.num_rows / base_seconds
    print(f"spark_ingest: {rows:,} events, master {args.master}")
    print(f"(a) ours: feed to Delta change log {ours:>9,.0f} events/s  ({seconds:.1f} s, {detail})")
    print(f"(b) baseline: append to Delta      {base:>9,.0f} events/s  (best of 3)")
    print(f"    ours / baseline = {ours / base:.2f}x  (target >= 0.5)")


if __name__ == "__main__":
    asyncio.run(main())
