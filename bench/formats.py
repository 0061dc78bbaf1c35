"""What `--format` and the change log's envelope columns cost, against native JSON, in one run.

    python -m bench.formats [--events 100000] [--rounds 5]

Pure CPU, no storage: made-up records shaped like the service's (`made_up_records`: creates,
updates, tier and tag changes, deletes), in batches of 250 as a worker hands them on. Measures
events/s of writing them as JSON lines in each format (what `cfp read --format` and the jsonl
observer do), and of turning them into change log rows with and without the envelope's five
columns. Rounds alternate; the best of each is reported with its ratio to native. Only ratios
mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pyarrow as pa

from observers.formats import Format
from observers.spark import schema
from observers.spark.records import made_up_records
from processor.changefeed.position import BlockSpan, ShardBatch, ShardPosition
from processor.cli.lines import formatted_lines, json_lines

BATCH = 250
SEGMENT = "idx/segments/2026/11/23/1000/meta.json"
TYPES = (
    "BlobCreated",
    "BlobPropertiesUpdated",
    "BlobTierChanged",
    "BlobTagsUpdated",
    "BlobDeleted",
)


def batches(all_records: list[dict[str, object]]) -> list[ShardBatch]:
    out = []
    for start in range(0, len(all_records), BATCH):
        part = all_records[start : start + BATCH]
        chunk = "log/00/2026/11/23/1000/00000.avro"
        offset = start * 1000
        block = BlockSpan(offset, len(part), offset + 8, offset + len(part) * 1000)
        out.append(
            ShardBatch(
                segment=SEGMENT,
                shard="log/00/2026/11/23/1000/",
                chunk=chunk,
                start=ShardPosition(chunk, block.offset, 0),
                end=ShardPosition(chunk, block.end, 0),
                blocks=(block,),
                records=part,  # type: ignore[arg-type]
                raw_index=list(range(len(part))),
                raw_count=len(part),
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = batches(made_up_records(args.events, kinds=TYPES))
    read_at = datetime.now(UTC)

    def lines(fmt: Format) -> Callable[[], object]:
        if fmt is Format.NATIVE:
            return lambda: [json_lines(b.records) for b in work]
        return lambda: [
            formatted_lines(b, b.records, fmt, stream_name="bench", read_timestamp=read_at)
            for b in work
        ]

    def rows(envelope: bool) -> Callable[[], object]:
        def run() -> object:
            saved = schema._envelope_columns
            if not envelope:  # the change log as it was: the five columns left empty
                schema._envelope_columns = _no_envelope  # type: ignore[assignment]
            try:
                return [
                    schema.records_table(
                        b.records, b.event_positions(), shard="00", segment=SEGMENT,
                        stream_name="bench", read_timestamp=read_at,
                    )
                    for b in work
                ]  # fmt: skip
            finally:
                schema._envelope_columns = saved

        return run

    cases: dict[str, Callable[[], object]] = {
        "json native": lines(Format.NATIVE),
        "json envelope": lines(Format.ENVELOPE),
        "json debezium": lines(Format.DEBEZIUM),
        "json ydb": lines(Format.YDB),
        "rows with envelope": rows(True),
        "rows without": rows(False),
    }
    best = {name: float("inf") for name in cases}
    for _ in range(args.rounds):
        for name, case in cases.items():
            started = time.perf_counter()
            case()
            best[name] = min(best[name], time.perf_counter() - started)
    print(f"formats: {args.events:,} events in batches of {BATCH}, best of {args.rounds} rounds")
    for name, seconds in best.items():
        against = "json native" if name.startswith("json") else "rows without"
        print(
            f"  {name:20s} {args.events / seconds:>12,.0f} ev/s   "
            f"x{seconds / best[against]:.2f} the time of {against}"
        )


def _no_envelope(columns: object, n: int, *_: object) -> dict[str, object]:
    """Constant columns: about what the change log cost before it had the envelope."""
    return {
        "stream_name": pa.array([""] * n),
        "read_method": pa.array([""] * n),
        "op": pa.array([""] * n),
        "read_timestamp": pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * n, schema.TIMESTAMP),
        "sort_keys": pa.array([[]] * n, pa.list_(pa.string())),
    }


if __name__ == "__main__":
    main()
