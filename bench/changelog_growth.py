"""One host writing into a change log that already holds months of events, against the same
writes into an empty one.

    python -m bench.changelog_growth [--rows 10000000] [--months 12] [--rounds 3]

(a) empty   bench/spark_ingest.py's host (`ingest_rate`: 180,000 events, one host, an embedded
            session) into a fresh --output.
(b) grown   the same host and feed into a copy of a change log that holds --rows events already:
            --months months of hourly segments before the feed's, in the feed's shards, written
            a month at a time and compacted (OPTIMIZE) after each month. Made once with Spark and
            kept in .bench/changelog_growth/. The state and history tables are marked as having
            applied those months, so the host's state job has nothing of them to fold: this
            measures the change log's fenced appends, whose only reads are each lease's floor
            (the highest position from the lease's first batch on: the partition and Delta's
            statistics keep it to a few files) and the check after its first append.

(a) and (b) take turns, --rounds times. Prints each run's rate and the ratio of the best of each
(target >= 0.8: the log's growth does not slow its writes; single runs vary by 20% here), and
what taking a lease cost in each: its fence commit and its floor read, in ms, from the host's
log (`spark.fence_committed`, `spark.synced`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
from pathlib import Path
from statistics import median
from typing import Any

from deltalake import DeltaTable, QueryBuilder

from bench.spark_ingest import WORKDIR as INGEST_WORKDIR
from bench.spark_ingest import ingest_rate
from observers.builtin.spark.session.output import Output, parse_output
from observers.builtin.spark.session.session import SparkOptions, open_session
from observers.builtin.spark.sql import sql_string, table_ref
from observers.builtin.spark.state.state_job import commit_metadata
from observers.builtin.spark.tables import create_tables
from observers.changes import CHANGES_SCHEMA

ROOT = Path(__file__).resolve().parent.parent
WORKDIR = ROOT / ".bench" / "changelog_growth"
BUILD_CONF = {
    # compaction into files of this size (Delta's default is 1 GB: one file per shard here)
    "spark.databricks.delta.optimize.maxFileSize": str(32 << 20),
    "spark.databricks.delta.optimize.minFileSize": str(32 << 20),
}


def feed_shape(changes: str) -> tuple[list[str], str]:
    """The shards of the change log (a) wrote, and its first segment's time (SQL literal)."""
    found = (
        QueryBuilder()
        .register("c", DeltaTable(changes))
        .execute("SELECT DISTINCT shard, min(segment) OVER () AS first FROM c")
        .read_all()
    )
    shards = sorted(str(s) for s in found.column("shard").to_pylist())
    first = found.column("first")[0].as_py()
    return shards, first.strftime("%Y-%m-%d %H:%M:%S")


def month_rows(shards: list[str], first_segment: str, month: int, months: int, n: int) -> str:
    """SQL: `n` events of the month `months - month` months before the feed's first segment,
    spread over its hours and the shards, with positions increasing along each shard."""
    k = len(shards)
    shard = (
        f"element_at(array({', '.join(sql_string(s) for s in shards)}), CAST(i % {k} + 1 AS INT))"
    )
    start = f"add_months(TIMESTAMP {sql_string(first_segment)}, {month - months})"
    segment = f"timestampadd(HOUR, CAST(i * 24 * 28 / {n} AS INT), {start})"
    blob = "concat('dir/', CAST(i % 1000 AS STRING), '/blob-', CAST(i % 200000 AS STRING))"
    columns = {
        "id": f"concat('m{month}-', CAST(i AS STRING))",
        "event_type": "'BlobCreated'",
        "event_time": f"timestampadd(SECOND, CAST(i % 3600 AS INT), {segment})",
        "container": "concat('c', CAST(i % 8 AS STRING))",
        "blob": blob,
        "sequencer": f"lpad(hex({month} * 100000000 + i), 32, '0')",
        "api": "'PutBlob'",
        "etag": "concat('0x', hex(i))",
        "content_length": "i % 100000",
        "content_type": "'application/octet-stream'",
        "blob_type": "'BlockBlob'",
        "tier": "CAST(NULL AS STRING)",
        "snapshot": "CAST(NULL AS STRING)",
        "version": "CAST(NULL AS STRING)",
        "tags": "CAST(NULL AS MAP<STRING, STRING>)",
        "schema_version": "5",
        "shard": shard,
        "segment": segment,
        "position": f"concat(date_format({segment}, 'yyyyMMddHHmm'), '.00000.', "
        "lpad(CAST(i AS STRING), 12, '0'), '.000000')",
        "raw": f'concat(\'{{"subject":"\', {blob}, \'","eventType":"BlobCreated"}}\')',
        "stream_name": "concat('log/', " + shard + ")",
        "read_method": "'feed'",
        "op": "'c'",
        "read_timestamp": "current_timestamp()",
        "sort_keys": "array(CAST(i AS STRING))",
    }
    assert list(columns) == CHANGES_SCHEMA.names, "every column of the change log, in order"
    select = ", ".join(f"{expr} AS {name}" for name, expr in columns.items())
    return f"SELECT {select} FROM (SELECT id AS i FROM range(0, {n}, 1, 4))"


def build_grown(
    folder: Path, shards: list[str], first: str, rows: int, months: int, master: str
) -> None:
    """The grown log of (b) at `folder` (made once; `.done` marks it whole)."""
    if (folder / ".done").exists():
        return
    shutil.rmtree(folder, ignore_errors=True)
    output = parse_output(str(folder))
    spark = open_session(SparkOptions(output, master=master, app_name="changelog_growth"))
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for key, value in BUILD_CONF.items():
            spark.conf.set(key, value)
        create_tables(spark, output)
        changes = table_ref(output.changes)
        n = rows // months
        for month in range(months):
            spark.sql(f"INSERT INTO {changes} {month_rows(shards, first, month, months, n)}")
            spark.sql(f"OPTIMIZE {changes}").collect()
            print(f"  month {month + 1}/{months}: {n * (month + 1):,} events", flush=True)
        mark_applied(spark, output)
    finally:
        spark.stop()
    (folder / ".done").touch()


def mark_applied(spark: Any, output: Output) -> None:
    """Record in the state and history tables that the change log's months are applied."""
    latest = spark.sql(f"DESCRIBE HISTORY {table_ref(output.changes)} LIMIT 1").collect()
    spark.conf.set(
        "spark.databricks.delta.commitInfo.userMetadata", commit_metadata(int(latest[0]["version"]))
    )
    for uri in (output.state, output.history):
        spark.sql(f"ALTER TABLE {table_ref(uri)} SET TBLPROPERTIES ('cfp.bench' = 'grown')")
    spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")


def lease_takes(host_log: Path) -> list[tuple[str, float, float]]:
    """Per lease, from a host's JSON log: its fence commit's and its floor read's ms."""
    events = [json.loads(line) for line in host_log.read_text().splitlines() if line]
    fences = {e["lease"]: e["seconds"] for e in events if e["event"] == "spark.fence_committed"}
    floors = {e["lease"]: e["seconds"] for e in events if e["event"] == "spark.synced"}
    return [
        (lease, 1000 * fences[lease], 1000 * floors.get(lease, 0.0)) for lease in sorted(fences)
    ]


async def taking_run(
    master: str, grown: Path | None
) -> tuple[tuple[int, float, float, str], list[tuple[str, float, float]]]:
    """(a) (`grown` None) or (b) once, with what taking each lease cost."""
    run = await ingest_rate(master, start_from=grown)
    return run, lease_takes(INGEST_WORKDIR / "bench.log")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--months", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3, help="(a) then (b), this many times")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    first_run, first_takes = await taking_run(args.master, None)
    empty_runs, takes = [first_run], {"empty": first_takes, "grown": []}
    shards, first = feed_shape(parse_output(str(INGEST_WORKDIR / "out")).changes)
    grown = WORKDIR / f"grown-{args.rows}-{args.months}-{'.'.join(shards)}"
    print(f"changelog_growth: building {grown.name} (once)", flush=True)
    build_grown(grown, shards, first, args.rows, args.months, args.master)
    prefilled = DeltaTable(parse_output(str(grown)).changes)
    grown_runs = []
    for n in range(args.rounds):
        if n:
            run, took = await taking_run(args.master, None)
            empty_runs.append(run)
            takes["empty"] += took
        run, took = await taking_run(args.master, grown)
        grown_runs.append(run)
        takes["grown"] += took
    print(
        f"changelog_growth: {empty_runs[0][0]:,} events, master {args.master}, "
        f"best of {args.rounds}"
    )
    print("(a) into an empty change log")
    empty = _report(empty_runs)
    print(
        f"(b) into one of {prefilled.count():,} events ({args.months} months, "
        f"{len(prefilled.file_uris()):,} files)"
    )
    full = _report(grown_runs)
    print(f"    grown / empty = {full / empty:.2f}x  (target >= 0.8)")
    for kind, found in takes.items():
        fence = median(f for _, f, _ in found)
        floor = median(f for _, _, f in found)
        print(
            f"    taking a lease, {kind}: fence {fence:,.0f} ms, floor read {floor:,.0f} ms "
            f"(medians of {len(found)}; each: "
            + ", ".join(f"{f:,.0f}+{r:,.0f}" for _, f, r in found)
            + ")"
        )


def _report(runs: list[tuple[int, float, float, str]]) -> float:
    """Print each run's rate; the best."""
    for rows, seconds, _, detail in runs:
        print(f"    {rows / seconds:>9,.0f} events/s  ({seconds:.1f} s, {detail})")
    return max(rows / seconds for rows, seconds, _, _ in runs)


if __name__ == "__main__":
    asyncio.run(main())
