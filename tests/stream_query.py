"""A Structured Streaming query on `format("blobchangefeed")` into a Delta table, run as its own
process by the source's integration tests (so that they can kill its driver with SIGKILL):

    python -m tests.stream_query CHECKPOINT TABLE [--available-now] [--remote sc://...]
        [--option KEY=VALUE ...]

The connection string comes from `CFP_CONNECTION_STRING` unless an option gives it. Prints the
query's plan, then one JSON line per finished micro-batch (its progress) on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from observers.builtin.spark.session.output import parse_output
from observers.builtin.spark.session.session import SparkOptions, open_session
from processor.connection import ENV_VAR, storage_access
from processor.streaming.registration import register


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("table")
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--remote")
    parser.add_argument("--register", action="store_true", help="register the source here")
    parser.add_argument("--option", action="append", default=[])
    args = parser.parse_args()
    hooks = (register,) if args.register or not args.remote else ()
    # a table in blob storage (abfs://) is in the account of CFP_CONNECTION_STRING: the
    # session gets its credentials
    on_account = "://" in args.table
    spark = open_session(
        SparkOptions(
            parse_output(args.table if on_account else "/unused"),
            access=storage_access(os.environ[ENV_VAR]) if on_account else None,
            master="local[2]",
            remotes=(args.remote,) if args.remote else (),
        )
    )
    for hook in hooks:
        hook(spark)
    reader = spark.readStream.format("blobchangefeed")
    for pair in args.option:
        key, _, value = pair.partition("=")
        reader = reader.option(key, value)
    frame = reader.load()
    frame.explain(extended=True)
    writer = frame.writeStream.format("delta").option("checkpointLocation", args.checkpoint)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    query = writer.start(args.table)
    seen = -1
    while True:
        for progress in _progresses(query):
            if progress["batchId"] > seen:
                seen = progress["batchId"]
                print(json.dumps(progress), flush=True)
        if not query.isActive:
            break
        time.sleep(0.2)
    error = query.exception()
    if error is not None:
        print(f"query failed: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


def _progresses(query: Any) -> list[dict[str, Any]]:
    return [json.loads(p.json) for p in query.recentProgress]


if __name__ == "__main__":
    raise SystemExit(main())
