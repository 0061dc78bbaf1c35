"""What a filter (`--container`, `--blob-prefix`, ...) costs `cfp read`, on a feed where about
90 % of the events are filtered out.

    python -m bench.filter_cost [--events 200000] [--rounds 3]

Uses the small-block feed of `bench.read_throughput` (built there, or here when missing: the
same config, the same cache under `.bench/`). In one run, alternating for `--rounds` rounds,
it reads the whole feed with `FeedReader`, as `cfp read` does, and counts every record read
(delivered or filtered out):

  (b)  no filter, every record written as JSON (what `cfp read` does today);
  (f)  the 90 % filter, the records it keeps written as JSON;
  (d)  no filter, no JSON: reading and decoding alone;
  (df) the 90 % filter, no JSON: reading, decoding and filtering;
  (fa) a filter that keeps everything but must look at every record (globs matching every
       container), with JSON: the worst case, all of the filter's work and none of its savings.

The filter's own cost is (df) against (d) and (fa) against (b); (f) against (b) is what a
user sees. Best round of each is reported, with the median; only ratios mean anything.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import dataclass

from bench.read_feeds import WORKDIR, build_small, feed_config, marker_ok, small_marker
from processor.changefeed.change_filter import ChangeFilter
from processor.changefeed.feed_reader import FeedReader
from processor.changefeed.selection import EventFilter
from processor.changefeed.storage.feed_storage import FeedStorage
from processor.emulator.azurite import Azurite
from processor.logs import configure_logging
from processor.runtime import tune_gc

# containers cfp-emu-0..3 and names data/0/ .. data/6/: about 3/4 x 1/7 = 11 % kept
NINETY = ChangeFilter.of(containers=["cfp-emu-[0-2]"], blob_prefix="data/1/")
EVERYTHING = ChangeFilter.of(containers=["cfp-emu-*", "*"], blob_prefix="")
NONE = ChangeFilter()


@dataclass
class Run:
    read: int  # records read (delivered or filtered out)
    kept: int
    seconds: float

    @property
    def per_s(self) -> float:
        return self.read / self.seconds


async def read(conn: str, change: ChangeFilter, *, as_json: bool) -> Run:
    read = kept = sink = 0
    start = time.perf_counter()
    async with FeedStorage.from_connection_string(conn) as storage:
        reader = FeedReader(storage, event_filter=EventFilter(change=change), with_json=as_json)
        async for batch in reader.batches():
            read += batch.raw_count
            kept += len(batch)
            if as_json:  # as `cfp read` writes them
                sink += len(batch.json_lines(len(batch)))
    return Run(read, kept, time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tune_gc()
    configure_logging(level="WARNING")
    WORKDIR.mkdir(exist_ok=True)
    config = feed_config(args.events)
    want = small_marker(args.events)
    server = Azurite(WORKDIR / "azurite-small").start()
    try:
        conn = server.connection_string
        marker = WORKDIR / "small.json"
        if not marker_ok(marker, want):
            marker.unlink(missing_ok=True)
            print(f"building the small-block feed of {args.events:,} blob operations ...")
            asyncio.run(build_small(conn, config))
            marker.write_text(json.dumps(want))
        lines = {
            "b": (NONE, True),
            "f": (NINETY, True),
            "d": (NONE, False),
            "df": (NINETY, False),
            "fa": (EVERYTHING, True),
        }
        runs: dict[str, list[Run]] = {k: [] for k in lines}
        for _ in range(args.rounds):
            for key, (change, as_json) in lines.items():
                runs[key].append(asyncio.run(read(conn, change, as_json=as_json)))
        report(runs)
    finally:
        server.stop()


def report(runs: dict[str, list[Run]]) -> None:
    best = {k: max(v, key=lambda r: r.per_s) for k, v in runs.items()}
    read = best["b"].read
    assert all(r.read == read for v in runs.values() for r in v), "record counts differ"
    assert best["fa"].kept == best["b"].kept, "the keep-everything filter dropped records"
    kept = best["f"].kept / best["b"].kept
    print(f"\n== {read:,} records read; the 90 % filter keeps {kept:.1%} of the events ==")
    names = {
        "b": "(b)  no filter, JSON out      ",
        "f": "(f)  90 % filter, JSON out    ",
        "d": "(d)  no filter, decode only   ",
        "df": "(df) 90 % filter, decode only ",
        "fa": "(fa) keep-all filter, JSON out",
    }
    for key, name in names.items():
        median = statistics.median(r.per_s for r in runs[key])
        print(f"{name} {best[key].per_s:>9,.0f} records/s  (median {median:,.0f})")
    print(
        f"     (df) / (d) = {best['df'].per_s / best['d'].per_s:5.2f}x  "
        "the filter's own cost on reading (target >= 0.90x)"
    )
    print(
        f"     (fa) / (b) = {best['fa'].per_s / best['b'].per_s:5.2f}x  "
        "worst case: every record looked at, none dropped"
    )
    print(
        f"     (f)  / (b) = {best['f'].per_s / best['b'].per_s:5.2f}x  "
        "what `cfp read` gains with the 90 % filter"
    )


if __name__ == "__main__":
    main()
