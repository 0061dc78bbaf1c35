"""Read throughput: `cfp read` as a process, against a download + fastavro script and the SDK.

    python -m bench.read_throughput [--profiles small,large,mixed] [--rounds 3]

Builds (once, then reuses) the feeds of `bench/read_feeds.py` in Azurites of their own under
`.bench/`, then measures on each, in one run and against the same Azurite:

  (a)  sdk      azure-storage-blob-changefeed `ChangeFeedClient.list_changes()` over the first
                `--sdk-events` events (a subset: it is slow), in this process;
  (b)  cfp      `cfp read --include-control` as a process of its own, timed from its spawn to
                its exit, its lines counted (Control records included, so that (b) and (c)
                decode the same records); also the time to its first line and its peak RSS;
  (c)  script   `bench/naive_read.py` as a process: list the chunks, download each whole, decode
                it with fastavro, drop each record;
  (c2) script   the same printing every record as a JSON line (`--json`): the work (b) does with
                the records, without positions, order or checks.

One warm-up run of each, then (b), (c) and (c2) alternate for `--rounds` rounds; the best round
of each is reported, with the median. Last, `python -X importtime` of a `cfp read` that stops
at its first event: the imports a process pays before its first line.
The machine is shared and noisy: only the ratios measured in one run mean anything.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.read_feeds import (
    PROFILES,
    ROOT,
    WORKDIR,
    build_mixed,
    build_small,
    feed_config,
    marker_ok,
    mixed_marker,
    relayout,
    small_marker,
)
from processor.emulator.azurite import Azurite
from processor.logs import configure_logging

CFP_READ = ("-m", "processor", "read", "--include-control")
SCRIPT = (str(ROOT / "bench" / "naive_read.py"),)


@dataclass(frozen=True)
class Run:
    """One process's run: records it read, seconds from its spawn to its exit and to its first
    line on stdout, its peak RSS (bytes)."""

    events: int
    seconds: float
    first_s: float
    rss: int

    @property
    def per_s(self) -> float:
        return self.events / self.seconds


def spawn(args: tuple[str, ...], conn: str, *, count_stderr: bool = False) -> Run:
    """Run `python ARGS` under GNU time (its own peak RSS: the child's `ru_maxrss` in this
    process would count pages shared before the exec), reading its stdout as it comes."""
    report = WORKDIR / "rss.txt"
    command = ["/usr/bin/time", "-f", "%M", "-o", str(report), sys.executable, *args]
    env = {**os.environ, "CFP_CONNECTION_STRING": conn}
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: nobody reads it meanwhile
        start = time.perf_counter()
        child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr)
        assert child.stdout is not None
        lines, first = 0, 0.0
        fd = child.stdout.fileno()
        while data := os.read(fd, 1 << 20):
            if not first:
                first = time.perf_counter() - start
            lines += data.count(b"\n")
        status = child.wait()
        seconds = time.perf_counter() - start
        stderr.seek(0)
        err = stderr.read()
    if status != 0:
        raise SystemExit(f"{' '.join(args)} failed ({status}): {err.decode()[-2000:]}")
    if count_stderr:  # the script without --json prints nothing but its count
        lines = int(err.split()[-1])
    return Run(lines, seconds, first, int(report.read_text().split()[-1]) * 1024)


def measure_sdk(conn: str, limit: int) -> float:
    """Events/s of the official SDK over its first `limit` events."""
    from azure.storage.blob.changefeed import ChangeFeedClient

    client = ChangeFeedClient.from_connection_string(conn)
    n = 0
    start = time.perf_counter()
    for _ in client.list_changes():
        n += 1
        if n >= limit:
            break
    return n / (time.perf_counter() - start)


def import_times(conn: str) -> tuple[float, list[tuple[str, float]]]:
    """Seconds of imports of a `cfp read` that stops after its first event, and the top-level
    modules that took most of them (`python -X importtime`: cumulative microseconds)."""
    env = {**os.environ, "CFP_CONNECTION_STRING": conn}
    command = [sys.executable, "-X", "importtime", *CFP_READ, "--max-events", "1"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    top: dict[str, float] = {}
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|")
            if cumulative.strip().isdigit() and not name.startswith("  "):  # top level
                root = name.strip().split(".")[0]
                top[root] = top.get(root, 0.0) + int(cumulative) / 1e6
    ranked = sorted(top.items(), key=lambda kv: -kv[1])
    return sum(top.values()), ranked[:6]


def run_profile(name: str, conn: str, args: argparse.Namespace) -> None:
    sdk = measure_sdk(conn, args.sdk_events)
    kinds: dict[str, Callable[[], Run]] = {
        "cfp": lambda: spawn(CFP_READ, conn),
        "script": lambda: spawn(SCRIPT, conn, count_stderr=True),
        "json": lambda: spawn((*SCRIPT, "--json"), conn),
    }
    for make in kinds.values():
        make()  # warm-up: the page cache, Azurite's, the .pyc files
    runs: dict[str, list[Run]] = {kind: [] for kind in kinds}
    for _ in range(args.rounds):
        for kind, make in kinds.items():
            runs[kind].append(make())
    counts = {r.events for rs in runs.values() for r in rs}
    assert len(counts) == 1, f"record counts differ: {counts}"
    best = {kind: max(rs, key=lambda r: r.per_s) for kind, rs in runs.items()}
    cfp, script, kept = best["cfp"], best["script"], best["json"]

    def median(kind: str) -> str:
        return f"median {statistics.median(r.per_s for r in runs[kind]):,.0f}"

    first = statistics.median(r.first_s for r in runs["cfp"])
    rss = max(r.rss for r in runs["cfp"]) / 2**20
    print(f"\n== profile {name}: {PROFILES[name].summary}, {cfp.events:,} records ==")
    print(
        f"(a)  official SDK list_changes      {sdk:>9,.0f} events/s  ({args.sdk_events:,} events)"
    )
    print(f"(b)  cfp read, a process            {cfp.per_s:>9,.0f} events/s  ({median('cfp')})")
    print(
        f"(c)  script: download + fastavro    {script.per_s:>9,.0f} events/s  ({median('script')})"
    )
    print(f"(c2) script, printing JSON lines    {kept.per_s:>9,.0f} events/s  ({median('json')})")
    print(f"     cfp / SDK     = {cfp.per_s / sdk:6.1f}x  (target >= 50x)")
    print(f"     cfp / script  = {cfp.per_s / script.per_s:6.2f}x  (target >= 1.5x, moonshot 2x)")
    print(f"     cfp / (c2)    = {cfp.per_s / kept.per_s:6.2f}x  (the same work done on records)")
    print(
        f"     cfp: first line {first:.2f} s after its spawn (median; target <= 0.5 s); "
        f"peak RSS {rss:,.0f} MiB (target <= 250); script {script.rss / 2**20:,.0f} MiB"
    )


async def build(servers: dict[str, Azurite], args: argparse.Namespace) -> None:
    """Each profile's feed, unless its marker says it is there already."""
    config = feed_config(args.events)
    recipes = {
        "small": lambda: build_small(servers["small"].connection_string, config),
        "large": lambda: relayout(
            servers["small"].connection_string,
            servers["large"].connection_string,
            PROFILES["large"].blocks,
        ),
        "mixed": lambda: build_mixed(servers["mixed"].connection_string, args.mixed_events),
    }
    for name, recipe in recipes.items():
        marker = WORKDIR / f"{name}.json"
        mine = mixed_marker(args.mixed_events) if name == "mixed" else small_marker(args.events)
        if name not in servers or (not args.rebuild and marker_ok(marker, mine)):
            continue
        marker.unlink(missing_ok=True)
        print(f"building the {name} feed ({PROFILES[name].summary}) ...", flush=True)
        t = time.perf_counter()
        await recipe()
        print(f"  built in {time.perf_counter() - t:.0f}s", flush=True)
        marker.write_text(json.dumps(mine))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000, help="Of the small and large feeds.")
    parser.add_argument("--mixed-events", type=int, default=276_000)
    parser.add_argument("--profiles", default="small,large,mixed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sdk-events", type=int, default=20_000)
    parser.add_argument("--build-only", action="store_true", help="Build the feeds, then stop.")
    parser.add_argument("--rebuild", action="store_true", help="Rebuild the feeds even if cached.")
    args = parser.parse_args()
    configure_logging(level="WARNING")
    WORKDIR.mkdir(exist_ok=True)
    profiles = args.profiles.split(",")
    needed = set(profiles) | ({"small"} if "large" in profiles else set())
    servers = {name: Azurite(WORKDIR / f"azurite-{name}").start() for name in sorted(needed)}
    try:
        asyncio.run(build(servers, args))
        if args.build_only:
            return
        for name in profiles:
            run_profile(name, servers[name].connection_string, args)
        total, top = import_times(servers[profiles[0]].connection_string)
        listed = ", ".join(f"{name} {s:.2f}" for name, s in top)
        print(f"\ncfp read's imports to its first event: {total:.2f} s ({listed})")
    finally:
        for server in servers.values():
            server.stop()


if __name__ == "__main__":
    main()
