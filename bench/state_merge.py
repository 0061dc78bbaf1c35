"""The state job's MERGE at 100k, 1M and 10M blobs, against one host's ingest rate.

    python -m bench.state_merge [--sizes 100000,1000000,10000000] [--master local[2]]

For each size, a state table of that many live blobs (made once with Spark and kept in
.bench/state_merge/) takes, in turn, runs of 50,000 and of 500,000 changes, with deletion
vectors on and then off; the table is restored to its first version after each run. A run is
what the state job does with the change-log rows it reads: the fold of the changes into one row
per blob (`observers.spark.state.newest_per_blob`) and the MERGE into the table
(`merge_statement`), the same SQL on the same session settings. The changes are a mix a storage
account sees: 20% creates of new blobs, 30% overwrites, 10% deletes, 20% tier changes and 20%
tag changes of existing blobs, each with a sequencer newer than the blob's.

Then one host's ingest rate into the change log is measured in the same run
(`bench.spark_ingest.ingest_rate`, the 180,000 events of bench/spark_ingest.py), and the ratio
of the state's rate (500,000 changes at the largest size, deletion vectors on) to it is printed
(target >= 1.0: the state keeps up with a host writing at full speed), with how the time per
run grows with the table (target: 10M against 100k well under 100x). The MERGEs run after a
warm-up on a small table, on a session with the state job's settings (`state_job.JOB_CONF`).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

from bench.spark_ingest import ingest_rate
from observers.spark.output import parse_output
from observers.spark.session import SparkOptions, new_session, open_session
from observers.spark.sql import table_ref
from observers.spark.state import STATE_SCHEMA, merge_statement, newest_per_blob
from observers.spark.state_job import JOB_CONF
from observers.spark.tables import STATE_PROPERTIES, create_statement

ROOT = Path(__file__).resolve().parent.parent
WORKDIR = ROOT / ".bench" / "state_merge"
RUNS = (50_000, 500_000)

BLOB = "concat('dir/', CAST(b % 1000 AS STRING), '/blob-', lpad(CAST(b AS STRING), 10, '0'))"
CONTAINER = "concat('c', CAST(b % 8 AS STRING))"


def build_state(spark: Any, uri: str, blobs: int) -> None:
    """A state table of `blobs` live blobs (sequencers 0..blobs-1)."""
    spark.sql(create_statement(uri, STATE_SCHEMA, STATE_PROPERTIES)).collect()
    parts = max(2, blobs // 1_000_000)
    spark.sql(f"""INSERT INTO {table_ref(uri)}
        SELECT {CONTAINER} AS container, {BLOB} AS blob, false AS deleted,
          concat('0x', hex(b)) AS etag, b % 100000 AS content_length,
          'application/octet-stream' AS content_type, 'BlockBlob' AS blob_type,
          CAST(NULL AS STRING) AS tier, CAST(NULL AS MAP<STRING, STRING>) AS tags,
          CAST(NULL AS STRING) AS version, 'BlobCreated' AS event_type,
          TIMESTAMP'2026-01-01 00:00:00' AS event_time, concat('e', CAST(b AS STRING)) AS event_id,
          lpad(hex(b), 32, '0') AS sequencer, lpad(hex(b), 32, '0') AS tier_sequencer,
          lpad(hex(b), 32, '0') AS tags_sequencer
        FROM (SELECT id AS b FROM range(0, {blobs}, 1, {parts}))""").collect()


def changes_view(spark: Any, blobs: int, count: int) -> str:
    """`count` change-log rows of the mix, about the table's blobs (and new ones)."""
    name = f"bench_changes_{count}"
    spark.sql(f"""SELECT
          {CONTAINER} AS container, {BLOB} AS blob,
          CASE WHEN kind < 5 THEN 'BlobCreated' WHEN kind = 5 THEN 'BlobDeleted'
               WHEN kind < 8 THEN 'BlobTierChanged' ELSE 'BlobPropertiesUpdated' END AS event_type,
          TIMESTAMP'2026-02-01 00:00:00' AS event_time, concat('n', CAST(id AS STRING)) AS id,
          lpad(hex({blobs} + id), 32, '0') AS sequencer, concat('0x', hex({blobs} + id)) AS etag,
          id % 4096 AS content_length, 'text/plain' AS content_type, 'BlockBlob' AS blob_type,
          CAST(NULL AS STRING) AS version,
          CASE WHEN kind IN (6, 7) THEN 'Cool' END AS tier,
          CASE WHEN kind >= 8 THEN map('n', CAST(id AS STRING)) END AS tags,
          CAST(NULL AS STRING) AS snapshot
        FROM (SELECT id, id % 10 AS kind,
                CASE WHEN id % 10 < 2 THEN {blobs} + id ELSE (id * 7919) % {blobs} END AS b
              FROM range({count}))""").createOrReplaceTempView(name)
    return name


def timed_run(spark: Any, uri: str, view: str) -> float:
    source = f"{view}_folded"
    spark.sql(newest_per_blob(view)).createOrReplaceTempView(source)
    started = time.perf_counter()
    spark.sql(merge_statement(uri, source)).collect()
    return time.perf_counter() - started


def warm_up(spark: Any) -> None:
    """Runs on a small table first: a fresh JVM runs its first MERGEs several times slower
    (classes loaded, code compiled), which would count against the smallest size."""
    uri = parse_output(str(WORKDIR / "warm-up")).state
    shutil.rmtree(WORKDIR / "warm-up", ignore_errors=True)
    build_state(spark, uri, 20_000)
    for _ in range(3):
        timed_run(spark, uri, changes_view(spark, 20_000, 10_000))
    shutil.rmtree(WORKDIR / "warm-up", ignore_errors=True)


def measure(spark: Any, blobs: int) -> dict[tuple[bool, int], float]:
    uri = parse_output(str(WORKDIR / f"state-{blobs}")).state
    marker = WORKDIR / f"state-{blobs}.done"
    if not marker.exists():
        started = time.perf_counter()
        build_state(spark, uri, blobs)
        marker.touch()
        print(f"  made the table of {blobs:,} blobs in {time.perf_counter() - started:.0f} s")
    history = spark.sql(f"DESCRIBE HISTORY {table_ref(uri)}").collect()
    base = min(int(r["version"]) for r in history if r["operation"] == "WRITE")
    out = {}
    for dv in (True, False):
        for count in RUNS:
            spark.sql(f"RESTORE TABLE {table_ref(uri)} TO VERSION AS OF {base}").collect()
            if not dv:
                spark.sql(
                    f"ALTER TABLE {table_ref(uri)} SET TBLPROPERTIES "
                    "('delta.enableDeletionVectors' = 'false')"
                ).collect()
            out[(dv, count)] = timed_run(spark, uri, changes_view(spark, blobs, count))
            print(
                f"  {blobs:>10,} blobs  dv {'on ' if dv else 'off'}  {count:>7,} changes  "
                f"{out[(dv, count)]:6.1f} s  {count / out[(dv, count)]:>9,.0f} changes/s",
                flush=True,
            )
    spark.sql(f"RESTORE TABLE {table_ref(uri)} TO VERSION AS OF {base}").collect()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    WORKDIR.mkdir(parents=True, exist_ok=True)
    options = SparkOptions(
        parse_output(str(WORKDIR)),
        master=args.master,
        conf={"spark.driver.memory": "6g"},
        app_name="state-merge",
    )
    first = open_session(options)
    first.sparkContext.setLogLevel("ERROR")
    spark = new_session(first, options)  # as the state job: a session of its own ...
    for key, value in JOB_CONF.items():  # ... with its settings
        spark.conf.set(key, value)
    print(f"state_merge: master {args.master}, runs of {' and '.join(f'{n:,}' for n in RUNS)}")
    try:
        warm_up(spark)
        results = {blobs: measure(spark, blobs) for blobs in sizes}
    finally:
        first.stop()
    # the host's rate on the feed bench/spark_ingest.py reads (cached there), catching up
    rows, seconds, detail = await ingest_rate(args.master)
    ingest = rows / seconds
    largest, smallest = sizes[-1], sizes[0]
    state = RUNS[-1] / results[largest][(True, RUNS[-1])]
    print(
        f"host ingest into the change log: {ingest:,.0f} events/s ({rows:,} in {seconds:.1f} s, "
        f"{detail})"
    )
    print(
        f"state at {largest:,} blobs, {RUNS[-1]:,} changes, dv on: {state:,.0f} changes/s = "
        f"{state / ingest:.2f}x the ingest rate (target >= 1.0)"
    )
    for count in RUNS:
        growth = results[largest][(True, count)] / results[smallest][(True, count)]
        print(
            f"time per run of {count:,} changes, {largest:,} vs {smallest:,} blobs: {growth:.1f}x "
            f"for {largest // smallest}x the rows (target: well under 100x)"
        )


if __name__ == "__main__":
    asyncio.run(main())
