"""A host's start-up: from its process's start to its first lease taken and to its first commit.

    python -m bench.startup [--runs 3] [--events-per-segment 2000]

Starts a dedicated Azurite, emulates a feed, and times, for each kind of host, `--runs` hosts
started one after the other (each its own processor, so each takes every lease afresh):

  thin      `cfp run --observer spark --spark-remote ...` from a virtualenv of the `[connect]`
            role (pyspark-client, no JVM; made from deploy/requirements-connect.lock in
            .bench/startup/), against a warm `cfp spark-connect` server (up, and one host's
            writes done, before the first timed host starts);
  embedded  `cfp run --observer spark --spark-master local[2]` from the development install:
            its own JVM, which maps the install's class archive (`make install` makes it);
  bare      the same with the JDK's own class archive instead (`--spark-conf
            spark.driver.extraJavaOptions=-XX:SharedArchiveFile=...classes.jsa`): the baseline
            of the class archive's gain, started in turn with the embedded ones.

The times are read from each host's own log (`lease.acquired`, `spark.committed`) against the
moment the bench spawned it. The target (issue Q): a thin host takes its first lease within 3 s
of its start. Also prints where the time goes before the first lease: the host's imports and
set-up until `host.starting` is logged after its observer opened (`spark.opened`: the session
and the tables).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.spark_ingest import log_time
from observers.builtin.spark.session.class_archive import JAVA_OPTIONS_KEY, java_binary
from processor.emulator.azurite import ROOT, Azurite
from tests.helpers import emulate_afresh
from tests.spark_cluster import spark_connect_server
from tests.venvs import virtualenv

WORKDIR = ROOT / ".bench" / "startup"
DEV_PYTHON = Path(sys.executable)


@dataclass(frozen=True)
class Start:
    """Seconds from the spawn to each step the host logged."""

    started: float  # host.state starting: cfp's imports done, the host assembled
    opened: float  # spark.opened: its session and tables ready
    session_s: float  # of which the session's opening
    tables_s: float  # and the tables' (created if missing)
    lease: float  # the first lease.acquired
    commit: float  # the first spark.committed


def start_host(python: Path, conn: str, name: str, *spark: str) -> Start:
    """A host of its own processor, to its end (the thin host with no `java` on its PATH)."""
    path = str(python.parent) + ("" if "--spark-remote" in spark else ":/usr/bin:/bin")
    env = {"PATH": path, "CFP_CONNECTION_STRING": conn, "CFP_LOG_JSON": "1"}
    command = [
        str(python), "-m", "processor", "run", "--processor-name", name,
        "--lease-table", "cfpbenchstartup", "--no-http", "--until-caught-up",
        "--observer", "spark", "--output", str(WORKDIR / "out" / name),
        "--spark-warm-up-rows", "0", "--state-interval", "3600", *spark,
    ]  # fmt: skip
    spawned = time.time()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("{")]
    (WORKDIR / f"{name}.log").write_text("\n".join(lines) + "\n")
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}):\n" + done.stderr[-3000:])
    events = [json.loads(ln) for ln in lines]

    def first(kind: str) -> float:
        return next(log_time(e) for e in events if e.get("event") == kind) - spawned

    opened = next(e for e in events if e.get("event") == "spark.opened")
    return Start(
        started=first("host.state"),
        opened=first("spark.opened"),
        session_s=float(opened["session_s"]),
        tables_s=float(opened["tables_s"]),
        lease=first("lease.acquired"),
        commit=first("spark.committed"),
    )


def jdk_archive() -> Path:
    """The JDK's own class archive (of the JDK's classes only): what a JVM maps by default."""
    return Path(java_binary()).parents[1] / "lib" / "server" / "classes.jsa"


def summary(kind: str, starts: list[Start]) -> str:
    def med(values: list[float]) -> str:
        return f"{statistics.median(values):5.2f} s"

    each = ", ".join(f"{s.lease:.2f}" for s in starts)
    return (
        f"{kind:9} first lease {med([s.lease for s in starts])}  first commit "
        f"{med([s.commit for s in starts])}  (first lease of each: {each})\n"
        f"{'':9} before it: imports and set-up {med([s.started for s in starts])}, session "
        f"{med([s.session_s for s in starts])}, tables {med([s.tables_s for s in starts])}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--events-per-segment", type=int, default=2000)
    args = parser.parse_args()
    shutil.rmtree(WORKDIR / "out", ignore_errors=True)
    WORKDIR.mkdir(parents=True, exist_ok=True)
    thin_python = virtualenv(WORKDIR / "venv-connect", "requirements-connect.lock")
    azurite = Azurite(WORKDIR / "azurite").start()
    try:
        conn = azurite.connection_string
        await emulate_afresh(
            conn, seed=9, segments=2, events_per_segment=args.events_per_segment, feed_only=True
        )
        logs = WORKDIR / "spark-connect"
        shutil.rmtree(logs, ignore_errors=True)
        logs.mkdir()
        stamp = int(time.time())
        with spark_connect_server(logs, master="local[2]") as url:
            start_host(thin_python, conn, f"warm{stamp}", "--spark-remote", url)
            thin = [
                start_host(thin_python, conn, f"thin{stamp}n{n}", "--spark-remote", url)
                for n in range(args.runs)
            ]
        embedded, bare = [], []
        for n in range(args.runs):  # in turn: the machine's noise falls on both alike
            local = ("--spark-master", "local[2]")
            embedded.append(start_host(DEV_PYTHON, conn, f"embedded{stamp}n{n}", *local))
            without = ("--spark-conf", f"{JAVA_OPTIONS_KEY}=-XX:SharedArchiveFile={jdk_archive()}")
            bare.append(start_host(DEV_PYTHON, conn, f"bare{stamp}n{n}", *local, *without))
    finally:
        azurite.stop()
    print(f"startup: {args.runs} hosts of each kind, medians from the process's start (a feed of")
    print(f"         2 segments of {args.events_per_segment:,} events; the server warm)")
    print(summary("thin", thin))
    print(summary("embedded", embedded))
    print(summary("bare", bare))
    for what in ("lease", "commit"):
        ours, theirs = (statistics.median(getattr(s, what) for s in x) for x in (embedded, bare))
        print(f"embedded host's first {what} with the class archive: {ours / theirs:.2f}x bare")
    target = statistics.median(s.lease for s in thin)
    print(f"thin host's first lease: {target:.2f} s (target <= 3 s)")


if __name__ == "__main__":
    asyncio.run(main())
