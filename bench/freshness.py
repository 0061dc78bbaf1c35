"""Freshness: how soon an operation reaches an observer and the state table, with hints and without.

    python -m bench.freshness [--minutes 5] [--rate 200] [--publish-delay 60] [--hosts 3]
                              [--drop 0.1]

Two runs, one after the other, each on an Azurite of its own and a processor of its own, against
one `cfp spark-connect` server (local[2]): `--hosts` thin `cfp run --observer spark --spark-remote`
hosts with the defaults a user gets, and `cfp emulate --live --rate R --publish-delay D` making
the operations (event times from the wall clock; each record reaches the feed D s after its
operation, released every 3 s, as Azure's appear minutes late; `--feed-only`: the blob operations
themselves are Azure's work, not the pipeline's, and would take Azurite's share of the machine).

  feed only  the hosts read the feed alone; the server is cold (started just before them);
  hints      the emulator also writes each operation's Blob Storage event into a queue, dropping
             `--drop` of them; the hosts read it with `--hints-queue`; the server is warm.

In each run the emulator starts D + 10 s before the hosts (the feed holds records when they
start). Measured are the operations made in a window of `--minutes` that opens 60 s after the
hosts' start (with hints: once, too, the queue holds less than 3 s of hints: the hosts have read
the backlog of the emulator's lead, whose age measures their start, reported apart) and closes
at least D + 5 s before the emulator stops (it then releases what it holds at once, which would
look fresher than it is). Every operation is a row of the change log; read with
delta-rs after the run (change data feed, so each row has its commit's time):

  to an observer      the first commit that held it: its change log row or its hint's row in the
                      hints table (both written by the observer's `process_batch`/`process_hints`,
                      which return once their commit is in) less its event time;
  to the state table  the first state table commit whose row for its blob holds its sequencer
                      or a newer one, less its event time.

With hints, the targets (issue U) are measured over the operations whose hint came: p99 <= 3 s to
an observer, and over those of them the state table takes from hints (creates and deletes),
p99 <= 15 s to the state table. A dropped hint's operation comes with the feed, D s later: every
operation's figures are printed too. Without hints, the pipeline's own share is the time beyond D.
Also: from the hosts' start to the first row in the change log and in the state table (cold and
warm server), the hosts' CPU and the Delta commits per minute in the window.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from azure.storage.queue.aio import QueueClient
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from observers.builtin.spark.session.output import Output, parse_output
from processor.connection import ENV_VAR
from processor.emulator.azurite import ROOT, Azurite
from tests.cluster import Cluster
from tests.connect_servers import ConnectServer
from tests.delta_changes import written_rows

WORKDIR = ROOT / ".bench" / "freshness"
QUEUE = "cfp-bench-hints"
SETTLE_S = 60.0  # from the hosts' start to the window: their backlog read, the JVM warmed
HINTS_SETTLE_MAX_S = 300.0  # with hints, the longest the window waits for the queue's backlog
QUEUE_CAUGHT_UP_S = 3.0  # ...which is read once the queue holds fewer than this many seconds' hints
SAMPLE_S = 0.2  # how often the first rows are looked for
KEY = ("container", "blob", "sequencer")
StateTimes = dict[tuple[str, str], list[tuple[str, float]]]  # blob -> (sequencer, first shown)


@dataclass(frozen=True)
class Ages:
    """Seconds from operations to something, of `count` operations."""

    values: np.ndarray

    @property
    def count(self) -> int:
        return len(self.values)

    def p(self, q: float) -> float:
        return float(np.percentile(self.values, q)) if self.count else float("nan")

    def line(self, label: str) -> str:
        cells = "".join(f"{self.p(q):8.2f} s" for q in (50, 95, 99))
        return f"  {label:44}{cells}{self.count:>10,}"

    def less(self, seconds: float) -> Ages:
        return Ages(self.values - seconds)


@dataclass
class Run:
    """What one run measured."""

    name: str
    server: str  # cold | warm
    first_change_s: float
    first_state_s: float
    observer: Ages
    state: Ages
    hinted_observer: Ages | None
    hinted_state: Ages | None
    operations: int
    hinted: int
    host_cpu: float  # cores, the hosts together, over the window
    server_cpu: float
    commits_per_min: dict[str, float]


def cpu_s(pid: int) -> float:
    """User and system seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def seconds(column: pa.ChunkedArray) -> np.ndarray:
    """A timestamp column as float seconds since the epoch."""
    micros = pc.cast(pc.cast(column, pa.timestamp("us", tz="UTC")), pa.int64())
    return np.asarray(micros.to_numpy(), dtype=np.float64) / 1e6


def earliest(rows: pa.Table) -> dict[tuple[str, str, str], float]:
    """The first commit time of each (container, blob, sequencer)."""
    times = seconds(rows["_commit_timestamp"])
    first: dict[tuple[str, str, str], float] = {}
    for key, at in zip(zip(*(rows[c].to_pylist() for c in KEY), strict=True), times, strict=True):
        if key not in first or at < first[key]:
            first[key] = at
    return first


def state_times(rows: pa.Table) -> StateTimes:
    """Per blob, its state row's sequencers with the time each was first committed, oldest first."""
    per_blob: StateTimes = defaultdict(list)
    for (container, blob, seq), at in earliest(rows).items():
        per_blob[(container, blob)].append((seq, at))
    for changes in per_blob.values():
        changes.sort(key=lambda c: c[1])
    return per_blob


def in_state(per_blob: StateTimes, key: tuple[str, ...]) -> float:
    """When the state table first showed operation `key` or a newer one of its blob (inf: never).

    Sequencers of one blob compare as the state job compares them: same length, then as text."""
    container, blob, seq = key
    return min(
        (at for s, at in per_blob.get((container, blob), []) if len(s) == len(seq) and s >= seq),
        default=float("inf"),
    )


class Tables:
    """One run's Delta tables, read with delta-rs."""

    def __init__(self, output: Output) -> None:
        self.output = output

    def has_rows(self, uri: str) -> bool:
        try:
            actions = pa.table(DeltaTable(uri).get_add_actions(flatten=True))
        except TableNotFoundError:
            return False
        return bool(pc.sum(actions["num_records"]).as_py())

    async def first_rows(self, since: float) -> tuple[float, float]:
        """Seconds from `since` to the first row in the change log, and in the state table."""
        found: dict[str, float] = {}
        give_up = time.monotonic() + 600
        while len(found) < 2:
            if time.monotonic() > give_up:
                raise SystemExit(f"no rows in 10 minutes (found: {found}); see the hosts' logs")
            for name, uri in (("changes", self.output.changes), ("state", self.output.state)):
                if name not in found and self.has_rows(uri):
                    found[name] = time.time() - since
            await asyncio.sleep(SAMPLE_S)
        return found["changes"], found["state"]

    def commits_per_min(self, begin: float, end: float, *, hints: bool) -> dict[str, float]:
        names = ("changes", "state", "hints") if hints else ("changes", "state")
        counts = {}
        for name in names:
            stamps = [h["timestamp"] / 1000 for h in DeltaTable(self.output.table(name)).history()]
            counts[name] = sum(begin <= s < end for s in stamps) / ((end - begin) / 60)
        return counts


class Measured:
    """The operations made in the window, each as (container, blob, sequencer), event type and
    time, and when each reached the change log."""

    def __init__(self, tables: Tables, begin: float, end: float) -> None:
        rows = written_rows(tables.output.changes, *KEY, "event_type", "event_time")
        at = seconds(rows["event_time"])
        rows = rows.filter(pa.array((at >= begin) & (at < end)))
        self.keys = list(zip(*(rows[c].to_pylist() for c in KEY), strict=True))
        self.types = rows["event_type"].to_pylist()
        self.made = seconds(rows["event_time"])
        self.logged = seconds(rows["_commit_timestamp"])
        self.shown = np.full(len(self.keys), np.inf)  # when the state table first showed each

    def ages(self, times: np.ndarray, where: np.ndarray | None = None) -> Ages:
        ages = times - self.made
        return Ages(ages if where is None else ages[where])


def start_emulator(
    workdir: Path, conn: str, args: argparse.Namespace, duration_s: float, extra: tuple[str, ...]
) -> subprocess.Popen[bytes]:
    """`cfp emulate --live` for `duration_s`, in a process of its own (its CPU not the hosts')."""
    return subprocess.Popen(
        [sys.executable, "-m", "processor", "emulate", "--live", "--feed-only",
         "--rate", str(args.rate),
         "--publish-delay", str(args.publish_delay), "--duration", str(duration_s), *extra],
        cwd=ROOT, env={**os.environ, ENV_VAR: conn},
        stdout=(workdir / "emulate.json").open("wb"), stderr=(workdir / "emulate.log").open("wb"),
    )  # fmt: skip


async def one_run(
    args: argparse.Namespace, name: str, server: ConnectServer, *, hints: bool
) -> Run:
    workdir = WORKDIR / name.replace(" ", "-")
    azurite = Azurite(workdir / "azurite").start()
    cluster: Cluster | None = None
    emulator: subprocess.Popen[bytes] | None = None
    try:
        conn = azurite.connection_string
        lead_s = args.publish_delay + 10
        window_s = args.minutes * 60
        settle_max_s = HINTS_SETTLE_MAX_S if hints else SETTLE_S
        duration_s = lead_s + settle_max_s + window_s + args.publish_delay + 5
        queue = ("--hints-queue", QUEUE) if hints else ()
        faults = ("--hint-drop", str(args.drop)) if hints else ()
        emulator = start_emulator(workdir, conn, args, duration_s, (*queue, *faults))
        await asyncio.sleep(lead_s)
        cold = server.process is None
        if cold:
            server.start()
        out = workdir / "tables"
        cluster = Cluster(conn, "bench", workdir / "hosts", args=(
            "--observer", "spark", "--output", str(out), "--spark-remote", server.url,
            "--no-history", *queue,
        ))  # fmt: skip
        started = time.time()
        for i in range(args.hosts):
            cluster.start(f"h{i}")
        tables = Tables(parse_output(str(out)))
        first_change, first_state = await tables.first_rows(started)
        await asyncio.sleep(started + SETTLE_S - time.time())
        if hints:
            await queue_read(conn, args.rate * QUEUE_CAUGHT_UP_S, started, started + settle_max_s)
        begin = time.time()
        end = begin + window_s
        pids = [p.pid for p in cluster.procs.values()]
        jvm = server.jvm()
        hosts_before = sum(map(cpu_s, pids))
        server_before = cpu_s(jvm) if jvm else 0.0
        await asyncio.sleep(end - time.time())
        host_cpu = (sum(map(cpu_s, pids)) - hosts_before) / window_s
        server_cpu = ((cpu_s(jvm) - server_before) / window_s) if jvm else float("nan")
        print(f"  {name}: window closed; waiting for the emulator and the state table", flush=True)
        if await asyncio.to_thread(emulator.wait) != 0:
            raise SystemExit(f"cfp emulate failed: {(workdir / 'emulate.log').read_text()[-2000:]}")
        measured = await settled(tables, begin, end)
        cluster.stop_all()
        cluster = None
        return measure(name, "cold" if cold else "warm", tables, measured, hints=hints, timing=(
            first_change, first_state, begin, end, host_cpu, server_cpu,
        ))  # fmt: skip
    finally:
        if emulator is not None and emulator.poll() is None:
            emulator.kill()
        if cluster is not None:
            cluster.kill_all()
        azurite.stop()


async def queue_read(conn: str, messages: float, since: float, give_up_at: float) -> None:
    """Until the hints queue holds fewer than `messages` (the hosts have read the backlog the
    emulator's lead left there, which would measure their start, not their freshness), or the
    wall clock reaches `give_up_at`."""
    async with QueueClient.from_connection_string(conn, QUEUE) as queue:
        while time.time() < give_up_at:
            held = (await queue.get_queue_properties()).approximate_message_count or 0
            if held < messages:
                after = time.time() - since
                print(f"  hints: the queue's backlog read {after:.0f} s after the hosts' start "
                      f"({held} messages left)", flush=True)  # fmt: skip
                return
            await asyncio.sleep(SAMPLE_S * 10)
    print("  hints: the queue's backlog is still there; the window opens anyway", flush=True)


async def settled(tables: Tables, begin: float, end: float) -> Measured:
    """The window's operations, once the state table shows every one of them (or a newer one of
    its blob); gives up after 5 minutes with what it has."""
    give_up = time.monotonic() + 300
    while True:
        measured = Measured(tables, begin, end)
        per_blob = state_times(written_rows(tables.output.state, *KEY))
        measured.shown = np.array([in_state(per_blob, k) for k in measured.keys])
        missing = int(np.isinf(measured.shown).sum())
        if not missing or time.monotonic() > give_up:
            if missing:
                print(f"  {missing:,} operations never reached the state table", flush=True)
            return measured
        await asyncio.sleep(5)


def measure(
    name: str,
    server: str,
    tables: Tables,
    measured: Measured,
    *,
    hints: bool,
    timing: tuple[float, float, float, float, float, float],
) -> Run:
    first_change, first_state, begin, end, host_cpu, server_cpu = timing
    state = measured.shown
    hinted_observer = hinted_state = None
    observer = measured.logged
    hinted = 0
    if hints:
        hint_at = earliest(written_rows(tables.output.table("hints"), *KEY))
        came = np.array([hint_at.get(k, np.inf) for k in measured.keys])
        has_hint = np.isfinite(came)
        hinted = int(has_hint.sum())
        observer = np.minimum(measured.logged, came)
        hinted_observer = measured.ages(came, has_hint)
        takes = np.isin(np.array(measured.types), ["BlobCreated", "BlobDeleted"])
        hinted_state = measured.ages(state, has_hint & takes)
    return Run(
        name=name,
        server=server,
        first_change_s=first_change,
        first_state_s=first_state,
        observer=measured.ages(observer),
        state=measured.ages(state),
        hinted_observer=hinted_observer,
        hinted_state=hinted_state,
        operations=len(measured.keys),
        hinted=hinted,
        host_cpu=host_cpu,
        server_cpu=server_cpu,
        commits_per_min=tables.commits_per_min(begin, end, hints=hints),
    )


def report(args: argparse.Namespace, feed: Run, hinted: Run) -> None:
    assert hinted.hinted_observer is not None and hinted.hinted_state is not None
    delay = args.publish_delay
    print(
        f"freshness: {args.rate:g} operations/s, feed records published {delay:g} s late, "
        f"{args.hosts} thin hosts through cfp spark-connect (local[2]); {args.minutes:g} min "
        f"measured per run"
    )
    print(f"  {'from the operation':44}{'p50':>10}{'p95':>10}{'p99':>10}{'ops':>10}")
    print("feed only")
    print(feed.observer.line("to an observer"))
    print(feed.state.line("to the state table"))
    print(feed.observer.less(delay).line(f"  pipeline's share: observer, beyond {delay:g} s"))
    print(feed.state.less(delay).line(f"  pipeline's share: state table, beyond {delay:g} s"))
    dropped = 1 - hinted.hinted / max(1, hinted.operations)
    print(f"hints ({dropped:.1%} of the window's operations without a hint)")
    print(hinted.hinted_observer.line("to an observer, operations with a hint"))
    print(hinted.hinted_state.line("to the state table, hinted creates and deletes"))
    print(hinted.observer.line("to an observer, every operation"))
    print(hinted.state.line("to the state table, every operation"))
    for run in (feed, hinted):
        print(
            f"first rows after the hosts' start ({run.name}, {run.server} server): change log "
            f"{run.first_change_s:.1f} s, state table {run.first_state_s:.1f} s"
        )
    for run in (feed, hinted):
        commits = ", ".join(f"{k} {v:.1f}" for k, v in run.commits_per_min.items())
        print(
            f"cost ({run.name}): hosts' CPU {run.host_cpu:.2f} cores together, the server's JVM "
            f"{run.server_cpu:.2f} cores; Delta commits/min: {commits}"
        )
    ho, hs = hinted.hinted_observer.p(99), hinted.hinted_state.p(99)
    print(
        f"targets with hints: observer p99 {ho:.1f} s (<= 3 s: {'met' if ho <= 3 else 'MISSED'}), "
        f"state p99 {hs:.1f} s (<= 15 s: {'met' if hs <= 15 else 'MISSED'})"
    )
    print(f"hints: observer p99 {ho:.1f} s, state p99 {hs:.1f} s")
    fo, fs = feed.observer.p(99), feed.state.p(99)
    print(f"feed only: observer p99 {fo:.1f} s, state p99 {fs:.1f} s")


async def main(args: argparse.Namespace) -> None:
    shutil.rmtree(WORKDIR, ignore_errors=True)
    WORKDIR.mkdir(parents=True)
    server = ConnectServer(WORKDIR / "connect")
    try:
        feed = await one_run(args, "feed only", server, hints=False)
        hinted = await one_run(args, "hints", server, hints=True)
    finally:
        server.stop()
    report(args, feed, hinted)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="measured per run")
    parser.add_argument("--rate", type=float, default=200.0, help="operations per second")
    parser.add_argument("--publish-delay", type=float, default=60.0)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--drop", type=float, default=0.1, help="share of hints dropped")
    asyncio.run(main(parser.parse_args()))
