"""The state job's MERGEs at 100k, 1M and 10M blobs, with the history table off and on, against
one host's ingest rate.

    python -m bench.state_merge [--sizes 100000,1000000,10000000] [--master local[2]]

For each size, a state table of that many live blobs (made once with Spark and kept in
.bench/state_merge/) and an empty history table (each blob has one version, open: its state
row) take, in turn, runs of 50,000 and of 500,000 changes, without the history and then with
it; the tables are restored to their first version after each run. A run is what the state job
does with the change-log rows it reads, on the same session settings (`state_job.JOB_CONF`):
the fold of the changes into one row per blob
(`observers.builtin.spark.state.state_table.newest_per_blob`) and the MERGE into the state
(`merge_statement`), then, with the history, the versions the changes close
(`observers.builtin.spark.state.history_run.apply_history`: these changes take its fast path, the
append, as a state job's runs do when each event is newer than its blob's row). The changes are a
mix a storage account sees: 20% creates of new blobs, 30% overwrites, 10% deletes, 20% tier changes
and 20% tag changes of existing blobs, each with a sequencer newer than the blob's.

Then one host's ingest rate into the change log is measured in the same run
(`bench.spark_ingest.ingest_rate`, the 180,000 events of bench/spark_ingest.py), and the ratio
of the state job's rate (500,000 changes at the largest size, with the history) to it is
printed (target >= 1.0: the job keeps up with a host writing at full speed), with how the time
per run grows with the table (target: 10M against 100k well under 100x). The MERGEs run after a
warm-up on a small table.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

from bench.spark_ingest import ingest_rate
from observers.builtin.spark.session.output import parse_output
from observers.builtin.spark.session.session import SparkOptions, new_session, open_session
from observers.builtin.spark.sql import table_ref
from observers.builtin.spark.state import history
from observers.builtin.spark.state.history_run import Replaced, apply_history
from observers.builtin.spark.state.state_job import JOB_CONF
from observers.builtin.spark.state.state_table import STATE_SCHEMA, merge_statement, newest_per_blob
from observers.builtin.spark.tables import (
    HISTORY_PROPERTIES,
    STATE_PROPERTIES,
    create_statement,
)

ROOT = Path(__file__).resolve().parent.parent
WORKDIR = ROOT / ".bench" / "state_merge"
RUNS = (50_000, 500_000)

BLOB = "concat('dir/', CAST(b % 1000 AS STRING), '/blob-', lpad(CAST(b AS STRING), 10, '0'))"
CONTAINER = "concat('c', CAST(b % 8 AS STRING))"


def build_history(spark: Any, uri: str) -> None:
    """A history table with no closed version: each blob has one version, open (its state
    row)."""
    spark.sql(create_statement(uri, history.HISTORY_SCHEMA, HISTORY_PROPERTIES)).collect()


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


def timed_run(spark: Any, uri: str, view: str, history_uri: str | None = None) -> float:
    source = f"{view}_folded"
    spark.sql(newest_per_blob(view)).createOrReplaceTempView(source)
    started = time.perf_counter()
    if history_uri is not None:  # the job reads the history's newest version before and after
        newest(spark, history_uri)
    spark.sql(merge_statement(uri, source)).collect()
    if history_uri is not None:
        state_version = newest(spark, uri)
        newest(spark, history_uri)
        written = apply_history(
            spark,
            history_uri=history_uri,
            state_uri=uri,
            changes_view=view,
            replaced=Replaced(state_version, state_version, alone=True),
            state_at=state_version,
            write=lambda statement, _retry: spark.sql(statement).collect(),
        )
        assert written.appended, "the bench's changes are all newer than their blobs' rows"
    return time.perf_counter() - started


def newest(spark: Any, uri: str) -> int:
    return int(spark.sql(f"DESCRIBE HISTORY {table_ref(uri)} LIMIT 1").collect()[0]["version"])


def warm_up(spark: Any) -> None:
    """Runs on a small table first: a fresh JVM runs its first MERGEs several times slower
    (classes loaded, code compiled), which would count against the smallest size."""
    output = parse_output(str(WORKDIR / "warm-up"))
    shutil.rmtree(WORKDIR / "warm-up", ignore_errors=True)
    build_state(spark, output.state, 20_000)
    build_history(spark, output.history)
    for _ in range(3):
        timed_run(spark, output.state, changes_view(spark, 20_000, 10_000), output.history)
    shutil.rmtree(WORKDIR / "warm-up", ignore_errors=True)


def measure(spark: Any, blobs: int) -> dict[tuple[bool, int], float]:
    output = parse_output(str(WORKDIR / f"tables-{blobs}"))
    marker = WORKDIR / f"tables-{blobs}.done"
    if not marker.exists():
        started = time.perf_counter()
        build_state(spark, output.state, blobs)
        build_history(spark, output.history)
        marker.touch()
        print(f"  made the tables of {blobs:,} blobs in {time.perf_counter() - started:.0f} s")
    bases = {uri: first_write(spark, uri) for uri in (output.state, output.history)}
    out = {}
    for with_history in (False, True):
        for count in RUNS:
            for uri, base in bases.items():
                spark.sql(f"RESTORE TABLE {table_ref(uri)} TO VERSION AS OF {base}").collect()
            view = changes_view(spark, blobs, count)
            seconds = timed_run(spark, output.state, view, output.history if with_history else None)
            out[(with_history, count)] = seconds
            print(
                f"  {blobs:>10,} blobs  history {'on ' if with_history else 'off'}  "
                f"{count:>7,} changes  {seconds:6.1f} s  {count / seconds:>9,.0f} changes/s",
                flush=True,
            )
    for uri, base in bases.items():
        spark.sql(f"RESTORE TABLE {table_ref(uri)} TO VERSION AS OF {base}").collect()
    return out


def first_write(spark: Any, uri: str) -> int:
    """The version that holds the table as it was made."""
    commits = spark.sql(f"DESCRIBE HISTORY {table_ref(uri)}").collect()
    return min((int(r["version"]) for r in commits if r["operation"] == "WRITE"), default=0)


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
    rows, seconds, _, detail = await ingest_rate(args.master)
    ingest = rows / seconds
    largest, smallest = sizes[-1], sizes[0]
    print(
        f"host ingest into the change log: {ingest:,.0f} events/s ({rows:,} in {seconds:.1f} s, "
        f"{detail})"
    )
    for with_history in (False, True):
        rate = RUNS[-1] / results[largest][(with_history, RUNS[-1])]
        print(
            f"state job at {largest:,} blobs, {RUNS[-1]:,} changes, history "
            f"{'on' if with_history else 'off'}: {rate:,.0f} changes/s = {rate / ingest:.2f}x the "
            f"ingest rate{' (target >= 1.0)' if with_history else ''}"
        )
    for count in RUNS:
        growth = results[largest][(True, count)] / results[smallest][(True, count)]
        print(
            f"time per run of {count:,} changes, {largest:,} vs {smallest:,} blobs: {growth:.1f}x "
            f"for {largest // smallest}x the rows (target: well under 100x)"
        )


if __name__ == "__main__":
    asyncio.run(main())
