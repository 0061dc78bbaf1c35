"""One host reading the feed into the Delta change log, against appending the same rows ready-made.

    python -m bench.spark_ingest [--events-per-segment 60000] [--segments 3] [--master local[2]]

Starts a dedicated Azurite, emulates a feed (cached in .bench/spark_ingest/ between runs) and:

  (a) ours       one `cfp run --observer spark --until-caught-up` host with an embedded session
                 and a local --output: reading the shards, decoding, Arrow conversion, the
                 change log's fenced appends (a fence and a floor read per lease, then one
                 append per lease and write) and the checkpoints. Warm: the events after its
                 first commit, over the time from it until every lease is caught up; best of
                 --runs hosts (3), each into an empty --output (the baseline is a best of 3
                 too). (a") the same from the host's start (its Spark observer open: session
                 and tables), (a') from the process's start. The state job first runs one
                 --state-interval (an hour) after its lease is taken: this measures the change
                 log.
  (c) the same   through a warm `cfp spark-connect` server (`--no-connect` leaves it out).
  (b) baseline   the same rows, read back from (a)'s change log as one ready `pyarrow.Table`,
                 appended to a fresh Delta table with `spark.createDataFrame(table)` in a warm
                 session with the same master and settings (best of 3); (b') from that session's
                 start to its first, cold, append of them.

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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from observers.builtin.spark.session.output import parse_output
from observers.builtin.spark.session.session import SparkOptions, open_session
from observers.changes import CHANGES_SCHEMA
from processor.emulator.azurite import Azurite
from tests.helpers import emulate_afresh
from tests.spark_cluster import spark_connect_server

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


@dataclass(frozen=True)
class HostRun:
    """What one host did: seconds from its start (its observer open: session, tables) and from
    its process's start to every lease caught up; the same after its first commit (its JVM warm,
    the events it wrote from then on); and a summary."""

    seconds: float
    from_spawn: float
    warm_seconds: float
    warm_rows: int
    detail: str


def run_host(
    conn: str, output: Path, master: str, *, extra: tuple[str, ...] = (), name: str = "bench"
) -> HostRun:
    """One `cfp run --until-caught-up` host (`extra`: more options of `cfp run`)."""
    env = {**os.environ, "CFP_CONNECTION_STRING": conn, "CFP_LOG_JSON": "1", "CFP_HTTP_PORT": "0"}
    command = [
        sys.executable, "-m", "processor", "run",
        "--processor-name", f"{name}{int(time.time())}",
        "--lease-table", "cfpbenchleases",
        "--observer", "spark", "--output", str(output), "--spark-master", master,
        "--until-caught-up", "--lease-expiration", "3", "--state-interval", "3600",
        "--max-batch-events", "1000", *extra,
    ]  # fmt: skip
    spawned = time.time()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() + proc.stderr.splitlines() if ln.startswith("{")]
    (WORKDIR / f"{name}.log").write_text("\n".join(lines) + "\n")
    if proc.returncode != 0:
        raise SystemExit(f"host failed ({proc.returncode}):\n" + "\n".join(lines[-20:]))
    events = [json.loads(ln) for ln in lines]
    started = next(log_time(e) for e in events if e.get("event") == "host.starting")
    done = next(log_time(e) for e in events if e.get("event") == "processor.caught_up")
    writes = [e for e in events if e.get("event") == "spark.committed"]
    spark_s = sum(float(e.get("spark_s", 0)) for e in writes)
    opened = next(e for e in events if e.get("event") == "spark.opened")
    steps = ", ".join(f"{k.removesuffix('_s')} {opened[k]} s" for k in opened if k.endswith("_s"))
    commits = sum(int(e.get("commits", 1)) for e in writes)
    detail = (
        f"{len(writes)} writes, {commits} commits, {spark_s:.1f} s in Spark; before it: {steps}"
    )
    first = writes[0]
    warm_rows = sum(int(e.get("appended", 0)) for e in writes[1:])
    return HostRun(done - started, done - spawned, done - log_time(first), warm_rows, detail)


def read_back(uri: str) -> pa.Table:
    """The change log as delta-rs reads it, in the schema the hosts write (delta-rs gives
    string views, which Spark's Arrow conversion refuses)."""
    found = QueryBuilder().register("changes", DeltaTable(uri)).execute("SELECT * FROM changes")
    return pa.table(found).select(CHANGES_SCHEMA.names).cast(CHANGES_SCHEMA)


def baseline(table: pa.Table, master: str) -> tuple[float, float]:
    """Best seconds of three appends of `table` to a fresh Delta table in a warm session; and
    from the session's start to its first append of `table` done (cold)."""
    started = time.perf_counter()
    spark = open_session(SparkOptions(parse_output("/unused"), master=master, app_name="baseline"))
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory(dir=WORKDIR) as folder:
            spark.createDataFrame(table).write.format("delta").save(f"{folder}/cold")
            cold = time.perf_counter() - started
            best = float("inf")
            for n in range(3):
                started = time.perf_counter()
                spark.createDataFrame(table).write.format("delta").save(f"{folder}/t{n}")
                best = min(best, time.perf_counter() - started)
        return best, cold
    finally:
        spark.stop()


async def ingest(
    master: str,
    *,
    segments: int = 3,
    events_per_segment: int = 60_000,
    start_from: Path | None = None,
    extra: tuple[str, ...] = (),
    remote: bool = False,
) -> tuple[int, HostRun]:
    """(a): events written and how the host did. The host writes into an empty --output, or
    into a copy of `start_from` (tables that hold events already: the events written are those
    added). `remote`: through a `cfp spark-connect` server with `master`, warmed up first by a
    host of its own on the same feed into other tables."""
    WORKDIR.mkdir(parents=True, exist_ok=True)
    output = WORKDIR / "out"
    shutil.rmtree(output, ignore_errors=True)
    before = 0
    if start_from is not None:
        shutil.copytree(start_from, output)
        before = DeltaTable(parse_output(str(output)).changes).count()
    azurite = Azurite(WORKDIR / "azurite").start()
    try:
        conn = azurite.connection_string
        await build_feed(conn, segments, events_per_segment)
        if not remote:
            run = run_host(conn, output, master, extra=extra)
        else:
            logs = WORKDIR / "spark-connect"
            shutil.rmtree(logs, ignore_errors=True)
            logs.mkdir()
            with spark_connect_server(logs, master=master) as url:
                shutil.rmtree(WORKDIR / "warm", ignore_errors=True)
                via = ("--spark-remote", url, *extra)
                run_host(conn, WORKDIR / "warm", master, extra=via, name="warm")
                run = run_host(conn, output, master, extra=via, name="remote")
    finally:
        azurite.stop()
    return DeltaTable(parse_output(str(output)).changes).count() - before, run


async def ingest_rate(
    master: str,
    *,
    segments: int = 3,
    events_per_segment: int = 60_000,
    start_from: Path | None = None,
    extra: tuple[str, ...] = (),
) -> tuple[int, float, float, str]:
    """(a): events written, seconds from the host's start and from its process's, and what the
    host did (`ingest`)."""
    rows, run = await ingest(
        master, segments=segments, events_per_segment=events_per_segment,
        start_from=start_from, extra=extra,
    )  # fmt: skip
    return rows, run.seconds, run.from_spawn, run.detail


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=3)
    parser.add_argument("--events-per-segment", type=int, default=60_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--runs", type=int, default=3, help="hosts run for (a), each afresh; the best counts"
    )
    parser.add_argument(
        "--no-connect", action="store_true", help="leave out the host on Spark Connect (c)"
    )
    args = parser.parse_args()
    shape = {"segments": args.segments, "events_per_segment": args.events_per_segment}
    runs = [await ingest(args.master, **shape) for _ in range(args.runs)]
    rows, run = max(runs, key=lambda r: r[1].warm_rows / r[1].warm_seconds)
    tried = ", ".join(f"{r.warm_rows / r.warm_seconds:,.0f}" for _, r in runs)
    table = read_back(parse_output(str(WORKDIR / "out")).changes)  # the last run's
    remote = None if args.no_connect else await ingest(args.master, remote=True, **shape)
    base_seconds, cold_seconds = baseline(table, args.master)
    base = table.num_rows / base_seconds
    warm = run.warm_rows / run.warm_seconds
    print(f"spark_ingest: {rows:,} events, master {args.master}")
    print(
        f"(a) ours, warm: feed to Delta change log {warm:>9,.0f} events/s  ({run.warm_rows:,} "
        f"events after its first commit in {run.warm_seconds:.1f} s; best of {len(runs)}: {tried})"
    )
    print(f"(b) baseline: append to Delta            {base:>9,.0f} events/s  (warm, best of 3)")
    print(f"    (a) / (b) = {warm / base:.2f}x  (target >= 0.5; both warm)")
    print(
        f"(a\") ours from the host's start        {rows / run.seconds:>9,.0f} events/s  "
        f"({run.seconds:.1f} s, its JVM cold; {run.detail})"
    )
    print(f'    (a") / (b) = {rows / run.seconds / base:.2f}x')
    if remote is not None:
        r_rows, r_run = remote
        r_warm = r_run.warm_rows / r_run.warm_seconds
        print(
            f"(c) ours on a warm Spark Connect server   {r_warm:>9,.0f} events/s after its first "
            f"commit; {r_rows / r_run.seconds:,.0f} events/s from the host's start "
            f"({r_run.seconds:.1f} s, {r_run.detail})"
        )
        print(f"    (c) / (b) = {r_warm / base:.2f}x warm, {r_rows / r_run.seconds / base:.2f}x "
              "from the host's start")  # fmt: skip
    print(
        f"(a') ours from the process's start   {rows / run.from_spawn:>8,.0f} events/s  "
        f"({run.from_spawn:.1f} s)"
    )
    print(
        f"(b') baseline from the session's start {table.num_rows / cold_seconds:>6,.0f} events/s  "
        f"({cold_seconds:.1f} s: a cold session's first append)"
    )
    print(f"    (a') / (b') = {cold_seconds / run.from_spawn:.2f}x  (both cold)")


if __name__ == "__main__":
    asyncio.run(main())
