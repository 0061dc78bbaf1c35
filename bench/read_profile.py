"""Where `cfp read` spends its time: a sampling profile (py-spy) of one read of a benchmark feed.

    python -m bench.read_profile [--profile mixed] [--rate 500]

Starts the feed's Azurite (built by `bench/read_throughput.py`, or here when missing), runs
`cfp read --include-control` under `py-spy record --gil` (the samples of whichever thread holds
the interpreter: the work that cannot overlap) and prints the share of those samples under the
parts of the read that cost most, then the costliest functions of their own. The process's
wall and CPU time are printed with it: what the decoder's native threads do without the
interpreter shows in the CPU time, not in the samples.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from bench.read_feeds import PROFILES, ROOT, WORKDIR
from bench.read_throughput import build
from processor.emulator.azurite import Azurite
from processor.logs import configure_logging

# the parts of a read, by a function their samples pass through (first match wins)
PARTS = (
    ("imports", "_find_and_load"),
    ("requests: listings", "FeedStorage.list_blobs"),
    ("requests: ranged GETs", "FeedStorage.read_range"),
    ("requests: manifests", "FeedStorage.read_document"),
    ("decode thread (its interpreter part)", "ShardReader._decode"),
    ("cutting batches (Window.take)", "Window.take"),
    ("writing lines", "ReadJob._lines"),
    ("the read loop", "ReadJob._read"),
    ("shard pumps", "FeedReader._pump"),
    ("responses read from sockets (aiohttp)", "_SelectorSocketTransport._read_ready"),
    ("the event loop", "BaseEventLoop._run_once"),
    ("interpreter start-up, click", "<module>"),
)


def sampled(command: list[str], env: dict[str, str], rate: int) -> Path:
    """Run `command` under py-spy; the raw samples' file."""
    out = Path(tempfile.mkdtemp(prefix="cfp-profile-")) / "samples.txt"
    spy = [str(Path(sys.executable).parent / "py-spy"), "record", "--gil", "-r", str(rate)]
    subprocess.run(
        [*spy, "-f", "raw", "-o", str(out), "--", *command],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True,
    )  # fmt: skip
    return out


def timed(command: list[str], env: dict[str, str]) -> str:
    """Run `command` under GNU time, without the profiler: its wall and CPU time."""
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%e s wall, %U s user, %S s system", *command],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True,
    )  # fmt: skip
    return done.stderr.decode().strip().splitlines()[-1]


def summarize(samples: Path, top: int) -> None:
    parts: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in samples.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n, frames = int(count), stack.split(";")[1:]  # without the process's own frame
        if not frames:
            continue
        total += n
        own[frames[-1].split(" (")[0]] += n
        names = [f.split(" (")[0] for f in frames]
        part = next((p for p, fn in PARTS if fn in names), "other")
        parts[part] += n
    print(f"{total:,} samples of the thread holding the interpreter")
    for part, n in parts.most_common():
        print(f"  {100 * n / total:5.1f} %  {part}")
    print("costliest functions of their own:")
    for fn, n in own.most_common(top):
        print(f"  {100 * n / total:5.1f} %  {fn}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", choices=sorted(PROFILES), default="mixed")
    parser.add_argument("--rate", type=int, default=500, help="Samples a second.")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--mixed-events", type=int, default=276_000)
    args = parser.parse_args()
    args.rebuild = False  # build() builds a feed only when its marker is missing
    configure_logging(level="WARNING")
    WORKDIR.mkdir(exist_ok=True)
    names = {args.profile} | ({"small"} if args.profile == "large" else set())
    servers = {name: Azurite(WORKDIR / f"azurite-{name}").start() for name in sorted(names)}
    try:
        asyncio.run(build(servers, args))  # unless its marker says it is built
        env = {**os.environ, "CFP_CONNECTION_STRING": servers[args.profile].connection_string}
        command = [sys.executable, "-m", "processor", "read", "--include-control"]
        print(f"cfp read of the {args.profile} feed: {timed(command, env)}")
        summarize(sampled(command, env, args.rate), args.top)
    finally:
        for server in servers.values():
            server.stop()


if __name__ == "__main__":
    main()
