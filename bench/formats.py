"""What `--format` and the change log's envelope columns cost, against native JSON, in one run.

    python -m bench.formats [--events 100000] [--rounds 5]

Pure CPU, no storage: made-up records shaped like the service's (`made_up_records`: creates,
updates, tier and tag changes, deletes), written as a chunk in schema version 5 and decoded as
one window, in batches of 250 as a worker hands them on (the window decoded afresh before each
round, outside the timing). Measures events/s of writing them as JSON lines in each format
(what `cfp read --format` and the jsonl observer do: native from the window's columns, the
others per record), and of turning them into change log rows with and without the envelope's
five columns. Rounds alternate; the best of each is reported with its ratio to native. Only
ratios mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pyarrow as pa

from observers import changes as schema
from observers.builtin.spark.changelog.made_up_records import made_up_records
from observers.formats import Format
from observers.origin import Origin
from processor.changefeed.decoding.avro_chunk import parse_header, scan_blocks
from processor.changefeed.decoding.columnar import decode_window
from processor.changefeed.position import ShardPosition
from processor.changefeed.shard_batch import ShardBatch
from processor.cli.read.lines import formatted_lines
from processor.emulator.avro_encoding import RecordEncoder, encode_block, encode_header
from processor.emulator.schemas import writer_schema

BATCH = 250
BLOCK = 1_000
SYNC = bytes(range(16))
CHUNK = "log/00/2026/11/23/1000/00000.avro"
SEGMENT = "idx/segments/2026/11/23/1000/meta.json"
TYPES = (
    "BlobCreated",
    "BlobPropertiesUpdated",
    "BlobTierChanged",
    "BlobSnapshotCreated",
    "BlobDeleted",
)


def chunk_of(records: list[dict[str, object]]) -> bytes:
    encoder = RecordEncoder(writer_schema(5))
    data = encode_header(writer_schema(5), SYNC)
    for start in range(0, len(records), BLOCK):
        data += encode_block([encoder.encode(r) for r in records[start : start + BLOCK]], SYNC)
    return data


def batches(chunk: bytes) -> list[ShardBatch]:
    """The chunk decoded as one window, cut into batches as a reader cuts them."""
    header = parse_header(chunk, chunk=CHUNK)
    blocks = scan_blocks(chunk[header.size :], base=header.size, sync=header.sync, chunk=CHUNK)
    window = decode_window(chunk, base=0, blocks=blocks.blocks, header=header, chunk=CHUNK)
    out = []
    for first in range(0, window.table.num_rows, BATCH):
        n = min(BATCH, window.table.num_rows - first)
        offsets, indexes = window.rows(first, first + n)
        out.append(
            ShardBatch(
                segment=SEGMENT,
                shard="log/00/2026/11/23/1000/",
                chunk=CHUNK,
                start=ShardPosition(CHUNK, int(offsets[0]), int(indexes[0])),
                end=ShardPosition(CHUNK, int(offsets[-1]), int(indexes[-1]) + 1),
                blocks=window.blocks,
                table=window.table.slice(first, n),
                offsets=offsets,
                indexes=indexes,
                raw_count=n,
                json_of_rows=lambda first=first, n=n: window.json().slice(first, n),
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    chunk = chunk_of(made_up_records(args.events, kinds=TYPES))
    read_at = datetime.now(UTC)
    work: list[ShardBatch] = []

    def lines(fmt: Format) -> Callable[[], object]:
        return lambda: [
            formatted_lines(b, len(b), fmt, processor="bench", read_at=read_at) for b in work
        ]

    def rows(envelope: bool) -> Callable[[], object]:
        def run() -> object:
            saved = schema._envelope_columns
            if not envelope:  # the change log as it was: the five columns left empty
                schema._envelope_columns = _no_envelope  # type: ignore[assignment]
            try:
                return [
                    schema.arrow_changes(
                        b.table, b.positions(), b.json(), Origin("00", SEGMENT, "bench", read_at),
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
            work[:] = batches(chunk)  # a fresh window: its JSON is made in the timing
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
