"""Read throughput: our reader vs the official SDK vs a bare "download whole + fastavro" baseline.

    python -m bench.read_throughput [--events 200000] [--profiles small,large] [--rounds 3]

Builds (once, then reuses) an emulated feed in a dedicated Azurite under `.bench/`: the
`small` profile has blocks of 1 to 60 events as the emulator writes them from real blob
operations; the `large` profile holds the very same records re-blocked into blocks of 500 to
2,000 events (block layout is the only difference). Then, in one run and against the same
Azurite, it measures events/s of:

  (a) sdk       azure-storage-blob-changefeed `ChangeFeedClient.list_changes()` over the first
                `--sdk-events` events (a subset: it is slow), per-event rate;
  (b) ours      `cfp read --include-control` over the whole feed, its job run in this process
                (lines counted, then dropped); Control records included so (b) and (c) do the
                same number of records;
  (c) baseline  list every chunk, download each whole (sequentially), decode with
                `fastavro.reader`, dropping each record as it comes; no positions, no JSON;
  (c2) reference: (c) keeping each chunk's records in a list and writing them as JSON lines,
                the work (b) must do with the records, without positions, order or checks.

(b), (c) and (c2) alternate for `--rounds` rounds; the best round of each is reported, with the
median. Last, `cfp read` runs once as a process of its own (output to /dev/null): its rate from
its start, and its peak RSS.
The machine is shared and noisy: only the ratios measured in one run mean anything.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import fastavro
from azure.storage.blob.aio import BlobServiceClient, ContainerClient

from observers.formats import Format
from processor import connection
from processor.changefeed.feed_reader import FeedReader
from processor.changefeed.layout import CONTAINER, segment_time, shard_name
from processor.changefeed.sdk_token import url_host
from processor.changefeed.selection import EventFilter
from processor.changefeed.shard_reader import DEFAULT_READ_SIZE
from processor.changefeed.storage import FeedStorage
from processor.cli.lines import json_lines
from processor.cli.read_job import ReadJob, Resume, TokenFormat
from processor.emulator.azurite import Azurite
from processor.emulator.emulator import Emulator, EmulatorConfig
from processor.emulator.feed_writer import FeedWriter
from processor.emulator.service import reset_account
from processor.logs import configure_logging
from processor.runtime import tune_gc

ROOT = Path(__file__).resolve().parent.parent
WORKDIR = ROOT / ".bench"
SHARDS = (4, 3, 5, 2, 4)
PROFILES = {"small": (1, 60), "large": (500, 2000)}


@dataclass
class Rate:
    events: int
    seconds: float
    nbytes: int = 0

    @property
    def per_s(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


def feed_config(events: int) -> EmulatorConfig:
    return EmulatorConfig(
        seed=2026,
        segments=len(SHARDS),
        events_per_segment=events // len(SHARDS),
        shards=SHARDS,
        schema_version=5,
        block_events=PROFILES["small"],
        chunk_bytes=4 << 20,
        containers=4,
        blobs_per_container=2000,
        concurrency=64,
        feed_only=True,  # the feed these operations give; the readers never look at blobs
    )


def marker_ok(marker: Path, want: dict[str, object]) -> bool:
    return marker.exists() and json.loads(marker.read_text()) == want


async def build_small(conn: str, config: EmulatorConfig) -> None:
    async with BlobServiceClient.from_connection_string(conn) as service:
        emulator = Emulator(service, config)
        await reset_account(service, emulator.containers)
        await emulator.run_batch()


async def relayout(src: str, dst: str, block_events: tuple[int, int]) -> None:
    """Copy every record of `src`'s feed into `dst`'s, same segments and shards, new blocks."""
    import random

    async with (
        FeedStorage.from_connection_string(src) as storage,
        BlobServiceClient.from_connection_string(dst) as service,
    ):
        await reset_account(service, [])
        writer = FeedWriter(
            service.get_container_client(CONTAINER),
            rng=random.Random(1),
            block_events=block_events,
            chunk_bytes=16 << 20,
        )
        await writer.ensure_feed()
        reader = FeedReader(storage, event_filter=EventFilter(include_control=True))
        current: str | None = None
        async for batch in reader.batches():  # read to the end: nothing is left open
            if batch.segment != current:
                if current is not None:
                    await writer.finalize_segment()
                current = batch.segment
                raw = await storage.read_document(batch.segment)
                assert raw is not None
                shards = len(json.loads(raw)["chunkFilePaths"])
                await writer.begin_segment(segment_time(current), shards=shards, schema_version=5)
            shard = int(shard_name(batch.shard))
            for record in batch.records:
                await writer.add(shard, record)
        if current is not None:
            await writer.finalize_segment()


def measure_sdk(conn: str, limit: int) -> Rate:
    from azure.storage.blob.changefeed import ChangeFeedClient

    client = ChangeFeedClient.from_connection_string(conn)
    n = 0
    start = time.perf_counter()
    for _ in client.list_changes():
        n += 1
        if n >= limit:
            break
    return Rate(n, time.perf_counter() - start)


class CountingSink(io.RawIOBase):
    """Where (b) writes its lines: counted, then dropped."""

    def __init__(self) -> None:
        self.written = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.written += len(data)
        return len(data)


async def measure_ours(conn: str) -> Rate:
    """`cfp read --include-control` in this process (its `ReadJob`), lines counted and dropped."""
    info = connection.parse(conn)
    host = url_host(info.blob_endpoint)
    sink = CountingSink()
    job = ReadJob(
        conn=conn,
        account=info.account,
        host=host,
        resume=Resume(),
        event_filter=EventFilter(include_control=True),
        fmt=Format.NATIVE,
        read_size=DEFAULT_READ_SIZE,
        follow=False,
        poll_interval=1.0,
        max_events=None,
        save_to=None,
        token_format=TokenFormat.CFP,
        out=sink,  # type: ignore[arg-type]
    )
    start = time.perf_counter()
    status = await job.run(asyncio.Event())
    if status != 0:
        raise SystemExit(f"cfp read's job failed ({status})")
    return Rate(job.printed, time.perf_counter() - start, sink.written)


async def measure_baseline(conn: str, *, keep_and_json: bool = False) -> Rate:
    """(c): every chunk downloaded whole, then decoded; records dropped as they come.

    With `keep_and_json` (reference line c2) each chunk's records are kept in a list and then
    written as JSON lines, the work `cfp read` has to do with them, minus positions, ordering
    and validation.
    """
    n = 0
    nbytes = 0
    start = time.perf_counter()
    async with ContainerClient.from_connection_string(conn, CONTAINER) as c:
        chunks = [b.name async for b in c.list_blobs(name_starts_with="log/")]
        for name in chunks:
            data = await (await c.download_blob(name)).readall()
            nbytes += len(data)
            if keep_and_json:
                records = list(fastavro.reader(io.BytesIO(data)))
                n += len(records)
                json_lines(records)
            else:
                n += sum(1 for _ in fastavro.reader(io.BytesIO(data)))
    return Rate(n, time.perf_counter() - start, nbytes)


def run_cfp_read(conn: str) -> tuple[int, float, int | None]:
    """`cfp read --include-control` as a process: events, seconds from its start, its peak RSS
    (through GNU time when the machine has it: a child's own `ru_maxrss` would count the pages
    it shared with this large process before its exec)."""
    command = [sys.executable, "-m", "processor", "read", "--include-control"]
    timer = Path("/usr/bin/time")
    report = WORKDIR / "cfp-read-rss.txt"
    if timer.exists():
        command = [str(timer), "-f", "%M", "-o", str(report), *command]
    env = {**os.environ, "CFP_CONNECTION_STRING": conn}
    counter = subprocess.Popen(["wc", "-l"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    start = time.perf_counter()
    status = subprocess.run(command, cwd=ROOT, env=env, stdout=counter.stdin, check=False)
    seconds = time.perf_counter() - start
    lines = int(counter.communicate()[0])
    if status.returncode != 0:
        raise SystemExit(f"cfp read failed ({status.returncode})")
    rss = int(report.read_text().split()[-1]) * 1024 if timer.exists() else None
    return lines, seconds, rss


def run_profile(name: str, conn: str, args: argparse.Namespace) -> None:
    sdk = measure_sdk(conn, args.sdk_events)
    ours_runs, base_runs, kept_runs = [], [], []
    for _ in range(args.rounds):
        ours_runs.append(asyncio.run(measure_ours(conn)))
        base_runs.append(asyncio.run(measure_baseline(conn)))
        kept_runs.append(asyncio.run(measure_baseline(conn, keep_and_json=True)))
    runs = ours_runs + base_runs + kept_runs
    assert all(r.events == base_runs[0].events for r in runs), "record counts differ"
    ours, base, kept = (max(r, key=lambda x: x.per_s) for r in (ours_runs, base_runs, kept_runs))

    def median(r: list[Rate]) -> str:
        return f"median {statistics.median(x.per_s for x in r):,.0f}"

    low, high = PROFILES[name]
    print(
        f"\n== profile {name}: blocks of {low}-{high} events, {base.events:,} records, "
        f"{base.nbytes / 1e6:.1f} MB of chunks =="
    )
    print(f"(a)  official SDK list_changes   {sdk.per_s:>9,.0f} events/s  ({sdk.events:,} events)")
    print(f"(b)  ours, JSON output           {ours.per_s:>9,.0f} events/s  ({median(ours_runs)})")
    print(f"(c)  bare baseline               {base.per_s:>9,.0f} events/s  ({median(base_runs)})")
    print(f"(c2) baseline keeping + JSON     {kept.per_s:>9,.0f} events/s  ({median(kept_runs)})")
    print(f"     ours / SDK      = {ours.per_s / sdk.per_s:6.1f}x  (target >= 50x)")
    print(f"     ours / baseline = {ours.per_s / base.per_s:6.2f}x  (target >= 1.5x, moonshot 2x)")
    print(
        f"     ours / (c2)     = {ours.per_s / kept.per_s:6.2f}x  (same work done on the records)"
    )
    events, seconds, rss = run_cfp_read(conn)
    peak = "unknown (no /usr/bin/time)" if rss is None else f"{rss / 2**20:,.0f} MiB"
    print(
        f"(b') cfp read, a process of its own {events / seconds:>9,.0f} events/s  "
        f"({seconds:.1f} s from its start; peak RSS {peak})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--profiles", default="small,large")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sdk-events", type=int, default=20_000)
    parser.add_argument("--rebuild", action="store_true", help="Rebuild the feeds even if cached.")
    args = parser.parse_args()
    tune_gc()  # as `cfp read` does; (b) and (c) run under the same process settings
    configure_logging(level="WARNING")
    WORKDIR.mkdir(exist_ok=True)
    config = feed_config(args.events)
    want = {"events": args.events, "shards": list(SHARDS), "seed": config.seed, "version": 3}
    small = Azurite(WORKDIR / "azurite-small").start()
    large = Azurite(WORKDIR / "azurite-large").start()
    try:
        marker = WORKDIR / "small.json"
        if args.rebuild or not marker_ok(marker, want):
            marker.unlink(missing_ok=True)
            print(
                f"building the small-block feed of {args.events:,} blob operations (feed only) ...",
                flush=True,
            )
            t = time.perf_counter()
            asyncio.run(build_small(small.connection_string, config))
            print(f"  built in {time.perf_counter() - t:.0f}s", flush=True)
            marker.write_text(json.dumps(want))
        large_marker = WORKDIR / "large.json"
        if "large" in args.profiles and (args.rebuild or not marker_ok(large_marker, want)):
            large_marker.unlink(missing_ok=True)
            print("re-blocking the same records into large blocks ...", flush=True)
            asyncio.run(
                relayout(small.connection_string, large.connection_string, PROFILES["large"])
            )
            large_marker.write_text(json.dumps(want))
        servers = {"small": small, "large": large}
        for name in args.profiles.split(","):
            run_profile(name, servers[name].connection_string, args)
    finally:
        small.stop()
        large.stop()


if __name__ == "__main__":
    main()
