"""The feed into Delta two ways on the same feed, in one run: the Spark source against the hosts.

    python -m bench.stream_ingest [--events-per-segment 60000] [--segments 3] [--master local[2]]
                                  [--max-events-per-trigger N]

Uses the feed of `bench/spark_ingest.py` (cached in .bench/spark_ingest/) and a dedicated
Azurite, then:

  (a) hosts    one `cfp run --observer spark --until-caught-up` host into the change log
               (fenced appends, checkpoints in the lease table), timed from the host's
               start, its Spark session open and its tables made (not counted), until every
               lease is caught up; (a') from its process's start.
  (b) source   `spark.readStream.format("blobchangefeed")` into a Delta table with a
               checkpoint and `Trigger.AvailableNow`, in an embedded session of the same master,
               timed from opening the session until the query ends; (b') the query alone;
               (b'') the same query again into a fresh table and checkpoint, the session warm.

Prints events/s of each and the ratios source / hosts: (b') / (a), Spark's start-up left out of
both, and (b) / (a'), counted in both. Both write every event once (checked).
Only the ratio means anything on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
from collections import Counter

from deltalake import DeltaTable

from bench.spark_ingest import WORKDIR, build_feed, ingest_rate
from observers.builtin.spark.session.output import parse_output
from observers.builtin.spark.session.session import SparkOptions, open_session
from processor.emulator.azurite import Azurite
from processor.streaming.registration import register


def stream_rate(
    conn: str, master: str, max_events: int | None
) -> tuple[int, float, list[float], int]:
    """(b): rows written, seconds from the session's opening to the first query's end, each
    query's own seconds, and the micro-batches the first one took."""
    opened = time.perf_counter()
    spark = open_session(SparkOptions(parse_output("/unused"), master=master, app_name="source"))
    register(spark)
    seconds: list[float] = []
    total, batches = 0.0, 0
    try:
        for run in range(2):
            out = WORKDIR / f"stream{run}"
            shutil.rmtree(out, ignore_errors=True)
            reader = spark.readStream.format("blobchangefeed").option("connectionString", conn)
            if max_events:
                reader = reader.option("maxEventsPerTrigger", str(max_events))
            started = time.perf_counter()
            query = (
                reader.load()
                .writeStream.format("delta")
                .option("checkpointLocation", str(out / "checkpoint"))
                .trigger(availableNow=True)
                .start(str(out / "table"))
            )
            query.awaitTermination()
            seconds.append(time.perf_counter() - started)
            if run == 0:
                total = time.perf_counter() - opened
                batches = sum(1 for p in query.recentProgress if p.numInputRows)
    finally:
        spark.stop()
    table = DeltaTable(str(WORKDIR / "stream0" / "table"))
    ids = table.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    if max(Counter(ids).values(), default=1) != 1:
        raise SystemExit("the source wrote an event twice")
    return len(ids), total, seconds, batches


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=3)
    parser.add_argument("--events-per-segment", type=int, default=60_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--max-events-per-trigger", type=int, default=None)
    args = parser.parse_args()
    rows, seconds, from_spawn, detail = await ingest_rate(
        args.master, segments=args.segments, events_per_segment=args.events_per_segment
    )
    azurite = Azurite(WORKDIR / "azurite").start()
    try:
        await build_feed(azurite.connection_string, args.segments, args.events_per_segment)
        streamed, total_s, (query_s, warm_s), batches = stream_rate(
            azurite.connection_string, args.master, args.max_events_per_trigger
        )
    finally:
        azurite.stop()
    if streamed != rows:
        raise SystemExit(f"the source wrote {streamed:,} events, the hosts {rows:,}")
    hosts, source = rows / seconds, streamed / total_s
    limit = args.max_events_per_trigger or "none"
    print(f"stream_ingest: {rows:,} events, master {args.master}")
    print(
        f"(a)  hosts into the change log       {hosts:>9,.0f} events/s  ({seconds:.1f} s, {detail})"
    )
    print(
        f"(a') hosts from the process's start  {rows / from_spawn:>9,.0f} events/s  "
        f"({from_spawn:.1f} s)"
    )
    print(
        f"(b)  source readStream into Delta     {source:>9,.0f} events/s  ({total_s:.1f} s, "
        f"{batches} micro-batches, maxEventsPerTrigger {limit})"
    )
    print(
        f"(b') the query alone                  {streamed / query_s:>9,.0f} events/s  "
        f"({query_s:.1f} s)"
    )
    print(
        f"(b'') again, the session warm         {streamed / warm_s:>9,.0f} events/s  "
        f"({warm_s:.1f} s)"
    )
    print(
        f"     source / hosts = {streamed / query_s / hosts:.2f}x  ((b') / (a): without start-up)"
    )
    print(f"     source / hosts = {source / (rows / from_spawn):.2f}x  ((b) / (a'): with start-up)")


if __name__ == "__main__":
    asyncio.run(main())
