"""CPU per record of decoding: fastavro against the columnar decoder, on the same bytes, in one run.

    python -m bench.decode_cost [--rounds 7] [--window-mib 8]

Pure CPU, no storage. Two kinds of input:

  - the recorded chunks (shared/fixtures/azure-recorded: real service output, 6 to 136 records
    each), each decoded whole, as one window;
  - windows of about `--window-mib` MiB of records the emulator makes, in every schema version it
    writes, in blocks of 100 to 1,000 records with the service's padded varints.

For each, CPU time (all threads: polars decodes on its own) per record of:

  (f)  fastavro to dicts, block by block with the exactness checks (`decode.decode_blocks`: the
       old path, now the fallback);
  (n)  the columnar decoder (`columnar.decode_window`: one native call, the row count checked;
       a window of fewer than `MIN_NATIVE_RECORDS` records goes to fastavro, then into the same
       Arrow columns, since a native call costs about 5 ms whatever its size);
  (n1) the same, always natively (what a small window would cost that way);
  (nj) (n), then every record's JSON from the columns (`record_json`), what `cfp read` and the
       change log's `raw` need.

Rounds alternate; the median of each is reported with (f)/(n), the times less CPU the columnar
decode takes. Only ratios mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from observers.builtin.spark.changelog.made_up_records import made_up_records
from processor.changefeed.decoding.avro_chunk import parse_header, scan_blocks
from processor.changefeed.decoding.columnar import NativeDecoder, decode_window, record_json
from processor.changefeed.decoding.decode import decode_blocks
from processor.emulator.avro_encoding import RecordEncoder, encode_block, encode_header
from processor.emulator.schemas import SUPPORTED_VERSIONS, event_types, writer_schema
from tests.fixtures import RECORDED, RECORDED_CHUNKS

SYNC = bytes(range(16))
ALWAYS = NativeDecoder(min_records=1)


@dataclass
class Input:
    name: str
    data: bytes
    records: int


def synthetic(version: int, window_bytes: int) -> Input:
    """About `window_bytes` of made-up records in schema `version`, blocks of 100-1,000."""
    schema = writer_schema(version)
    known = set(event_types(version))
    kinds = tuple(k for k in ("BlobCreated", "BlobDeleted", "BlobPropertiesUpdated") if k in known)
    encoder = RecordEncoder(schema)
    rng = random.Random(version)
    data, n = encode_header(schema, SYNC), 0
    while len(data) < window_bytes:
        size = rng.randint(100, 1000)
        records = made_up_records(size, kinds=kinds)
        for r in records:
            r["schemaVersion"] = version
        data += encode_block([encoder.encode(r) for r in records], SYNC)
        n += size
    return Input(f"v{version} window", data, n)


def decoders(data: bytes) -> dict[str, Callable[[], object]]:
    header = parse_header(data, chunk="c")
    blocks = scan_blocks(data[header.size :], base=header.size, sync=header.sync, chunk="c").blocks

    def fastavro() -> object:
        return decode_blocks(data, base=0, blocks=blocks, skip=0, header=header, chunk="c")

    def native() -> object:
        return decode_window(data, base=0, blocks=blocks, header=header, chunk="c")

    def always_native() -> object:
        return decode_window(data, base=0, blocks=blocks, header=header, chunk="c", native=ALWAYS)

    def native_json() -> object:
        decoded = decode_window(data, base=0, blocks=blocks, header=header, chunk="c")
        return record_json(decoded.table)

    return {"f": fastavro, "n": native, "n1": always_native, "nj": native_json}


def cpu_us(fn: Callable[[], object], records: int) -> float:
    started = time.process_time()
    fn()
    return (time.process_time() - started) / records * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--window-mib", type=float, default=8.0)
    args = parser.parse_args()
    recorded = [Input(str(p.relative_to(RECORDED)), p.read_bytes(), 0) for p in RECORDED_CHUNKS]
    inputs = [*recorded, *(synthetic(v, int(args.window_mib * 2**20)) for v in SUPPORTED_VERSIONS)]
    for i in inputs:
        header = parse_header(i.data, chunk="c")
        scan = scan_blocks(i.data[header.size :], base=header.size, sync=header.sync, chunk="c")
        i.records = sum(b.count for b in scan.blocks)
        for fn in decoders(i.data).values():
            fn()  # loaded and cached once: polars, the schema
    runs: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for i in inputs:
            for key, fn in decoders(i.data).items():
                runs.setdefault((i.name, key), []).append(cpu_us(fn, i.records))
    print(f"decode_cost: CPU us per record (all threads), median of {args.rounds} rounds")
    head = "".join(f"{k:>8s}" for k in ("(f)", "(n)", "(n1)", "(nj)"))
    print(f"{'input':58s} {'records':>8s}{head}  (f)/(n)")
    for i in inputs:
        f, n, n1, nj = (statistics.median(runs[(i.name, k)]) for k in ("f", "n", "n1", "nj"))
        print(f"{i.name:58s} {i.records:8,d}{f:8.2f}{n:8.2f}{n1:8.2f}{nj:8.2f}  {f / n:6.1f}x")


if __name__ == "__main__":
    main()
