"""`make chaos`: real hosts with the Spark observer on a live feed, under a seeded storm of faults.

    python -m tests.chaos.runner --seed 7 --duration 120 --hosts 4

Starts Azurite (on a data folder that survives its restarts), a `FaultyProxy` in front of its blob
and table ports (the hosts see only the proxy), a live emulated workload (new segments, shard
counts cycling through `--shards`, each segment `Publishing` then finalized), and the hosts, the
first of them made a zombie with a Spark write in flight (`zombie.py`: Delta must refuse its
append; `--no-zombie` leaves it out). The
hosts write the Delta tables into Azurite's blob storage through ABFS (`abfs://`, through the
proxy: the faults reach the change log's commits, its checkpoints and the state job's MERGEs;
`--tables local` writes them to a folder instead). Then it applies the schedule of
`schedule.make_schedule(seed)`, stops the faults, lets the hosts catch up, and checks the
invariants of `invariants.py` (the change log read with delta-rs), the state and history tables
with `cfp verify`, and the lease table at rest. The lease table and the state job's row are
sampled every 0.25 s for the whole run. It prints a summary
(faults, events, duplicates delivered to observers, takeover times); a failing run prints the
seed and the fault timeline, and exits 1.

With hints (the default; `--no-hints` leaves them out) the workload also writes each operation's
Blob Storage event into an Azurite queue with every fault of a real subscription (`HINT_FAULTS`:
dropped, twice, after the feed's record, out of order, poison beside it), and the hosts read it
(`--hints-queue`): the state table then takes hints while the storm goes on, and must still equal
the listing at rest with no row provisional, and no state row may ever have moved to an older
sequencer (its change data feed, read with delta-rs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from azure.storage.blob.aio import BlobServiceClient
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError

from leases import Lease, LeaseError, TableLeaseStore, job_token
from observers.builtin.spark.faults import HOLD_WRITE_FILE
from observers.builtin.spark.session.output import Output, delta_rs_options, parse_output
from processor.changefeed.errors import FeedError
from processor.changefeed.storage.layout import SEGMENT_INTERVAL
from processor.connection import ENV_VAR, azurite_connection_string, queue_client, storage_access
from processor.emulator.azurite import ROOT, Azurite
from processor.emulator.emulator import Emulator, EmulatorConfig
from processor.emulator.hint_publisher import HintFaults, HintPublisher
from tests.chaos.invariants import (
    Delivery,
    backward_moves,
    exactly_once,
    job_stalls,
    late_deliveries,
    redeliveries,
    rest_problems,
    sequencer_regressions,
)
from tests.chaos.proxy import FaultyProxy
from tests.chaos.schedule import KINDS, Fault, make_schedule
from tests.chaos.servers import ChaosServers
from tests.chaos.zombie import Zombie, start_with_a_zombie
from tests.delta_changes import written_rows
from tests.helpers import read_all
from tests.jvms import quick_jvms

PROCESSOR = "chaos"
TABLE = "chaosleases"
SAMPLE_EVERY_S = 0.25
STATE_JOB = job_token("state")
TABLES = f"abfs://chaos-tables@devstoreaccount1.dfs.core.windows.net/{PROCESSOR}"
HINTS_QUEUE = "chaos-hints"
HINT_FAULTS = HintFaults(drop=0.1, duplicate=0.1, late=0.1, reorder=0.1, poison=0.02)


@dataclass(frozen=True)
class ChaosConfig:
    workdir: Path
    seed: int = 1
    duration_s: float = 60.0
    hosts: int = 4
    expiry_s: float = 4.0
    kinds: tuple[str, ...] = KINDS
    segment_seconds: float = 15.0
    rate: float = 15.0
    shards: tuple[int, ...] = (2, 3, 4, 3)
    settle_s: float = 300.0
    tables: str = "abfs"  # or "local": a folder of workdir
    zombie: bool = True  # before the storm, a host paused with its write in flight (`zombie.py`)
    spark: str = "connect"  # thin hosts through `cfp spark-connect`; or "embedded": a JVM each
    servers: int = 2  # Spark Connect servers (with "connect"): each host uses the first answering
    state_interval_s: float = 2.0  # often, so that the faults meet the state job's reads and MERGEs
    hints: bool = True  # hints from a queue with every fault (HINT_FAULTS), beside the feed

    @property
    def output(self) -> Output:
        local = self.workdir / "tables"
        return parse_output(TABLES if self.tables == "abfs" else str(local))


@dataclass
class Report:
    config: ChaosConfig
    timeline: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    applied: Counter[str] = field(default_factory=Counter)
    events: int = 0
    delivered: int = 0
    takeovers: list[float] = field(default_factory=list)
    longest_takeover: str = ""  # after which fault
    settle_s: float = 0.0
    failed_writes: Counter[str] = field(default_factory=Counter)  # by log event
    abfs: tuple[int, int] = (0, 0)  # the tables' ABFS connections cut, and chunks delayed
    drains: list[float] = field(default_factory=list)  # seconds from SIGTERM to exit
    zombie: str = "none made"  # what became of the host paused with its write in flight
    servers: str = ""  # how soon the hosts wrote again after their server's loss
    staged: int = 0  # duplicates by design: the zombie's deliveries it never committed
    costliest: list[str] = field(default_factory=list)  # the lease moves that redelivered most
    moves: str = ""  # how the leases changed hands
    hints: str = ""  # what the hints queue was given and what the hosts made of it

    @property
    def duplicates(self) -> int:
        return max(0, self.delivered - self.events)

    def duplicates_verdict(self) -> str:
        """Issue X's target for the duplicates after the faults: reported, not an invariant
        (no event is in the change log twice whatever it says)."""
        met = self.duplicates - self.staged <= DUPLICATES_TARGET * self.events
        return "met" if met else "MISSED"

    def note(self, started: float, text: str) -> None:
        self.timeline.append(f"[{time.monotonic() - started:7.1f}s] {text}")

    def render(self) -> str:
        c = self.config
        takeovers = (
            f"{len(self.takeovers)}, median {statistics.median(self.takeovers):.1f}s, "
            f"max {max(self.takeovers):.1f}s (expiry {c.expiry_s:g}s; {self.longest_takeover})"
            if self.takeovers
            else "none measured"
        )
        lines = [
            f"chaos: seed {c.seed}, {c.duration_s:g}s of faults, {c.hosts} hosts ("
            + (
                f"thin, through {c.servers} Spark Connect server{'s' * (c.servers > 1)}"
                if c.spark == "connect"
                else "each with an embedded Spark"
            )
            + f"), shards {','.join(map(str, c.shards))}",
            f"  faults applied:      {sum(self.applied.values())} "
            f"({', '.join(f'{k} {n}' for k, n in sorted(self.applied.items()))})",
            f"  events in the feed:  {self.events:,} (non-Control)",
            f"  delivered:           {self.delivered:,} to observers, "
            f"{self.duplicates:,} duplicates ({self.duplicates / max(1, self.events):.1%}): "
            f"the zombie's uncommitted batches {self.staged:,} (by design), the faults' "
            f"{self.duplicates - self.staged:,} "
            f"({(self.duplicates - self.staged) / max(1, self.events):.1%}; target "
            f"{DUPLICATES_TARGET:.0%}: {self.duplicates_verdict()})",
            *(
                [f"  costliest moves:     {'; '.join(self.costliest)} (at least)"]
                if self.costliest
                else []
            ),
            *([f"  lease moves:         {self.moves}"] if self.moves else []),
            f"  takeovers after kill/pause: {takeovers}",
            f"  the tables under the faults: {self.abfs[0]} ABFS connections cut, "
            f"{self.abfs[1]} ABFS transfers delayed; "
            f"{self.failed_writes['spark.write_failed']} change-log writes failed (done again), "
            f"{self.failed_writes['job.failed']} state job runs failed (run again) of "
            f"{self.failed_writes['job.failed'] + self.failed_writes['job.ran']}",
            f"  SIGTERM drains: {len(self.drains)}"
            + (
                f", longest {max(self.drains):.0f}s, {sum(d > GRACE_S for d in self.drains)} past "
                f"the {GRACE_S:g}s grace period (then SIGKILL, as an orchestrator would)"
                if self.drains
                else ""
            ),
            f"  zombie with a write in flight: {self.zombie}",
            *([f"  Spark Connect servers: {self.servers}"] if self.servers else []),
            *([f"  hints:               {self.hints}"] if self.hints else []),
            f"  caught up after the faults in {self.settle_s:.1f}s",
        ]
        if self.problems:
            lines += ["FAILED", *(f"  - {p}" for p in self.problems)]
            lines += [f"replay: make chaos SEED={c.seed} DURATION={c.duration_s:g}", "timeline:"]
            lines += [f"  {t}" for t in self.timeline]
        else:
            lines.append("  invariants: all hold")
        return "\n".join(lines)


RUN_MARKER = "CFP_CHAOS_RUN"  # in the environment of the run's hosts and of their children


async def outliving(workdir: Path, patience_s: float = 60.0) -> list[str]:
    """The processes of this run still alive once every host has ended (a host's JVM that
    hangs in its exit, say), after waiting `patience_s` for them; killed, so they never
    outlive the run either."""
    marker = f"{RUN_MARKER}={workdir}".encode()

    def alive() -> dict[int, str]:
        found = {}
        for environ in Path("/proc").glob("[0-9]*/environ"):
            with contextlib.suppress(OSError):
                if marker in environ.read_bytes().split(b"\0"):
                    cmd = (environ.parent / "cmdline").read_bytes().split(b"\0")[0]
                    found[int(environ.parent.name)] = cmd.decode(errors="replace")
        return found

    deadline, left = time.monotonic() + patience_s, alive()
    while left and time.monotonic() < deadline:
        await asyncio.sleep(1)
        left = alive()
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return [f"pid {pid} ({cmd})" for pid, cmd in sorted(left.items())]


class Hosts:
    """The host processes; logs append to `workdir/hN.log` across restarts."""

    def __init__(self, config: ChaosConfig, conn: str, remote: str | None = None) -> None:
        self.config = config
        self.conn = conn
        self.remote = remote  # the Spark Connect server's URL; None: embedded sessions
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.paused: set[int] = set()
        self.exit_codes: list[tuple[str, int]] = []
        self.stopping: set[int] = set()  # signalled to exit by the runner
        self.log_at_start: dict[int, int] = {}  # each host's log size when it was last started

    def name(self, i: int) -> str:
        return f"h{i}"

    def start(self, i: int, *, skew_s: float = 0.0, hold: Path | None = None) -> None:
        """Start host `i` (`hold`: its second Spark write held in flight until that file
        exists, `zombie.py`)."""
        old = self.procs.get(i)
        if old is not None and old.poll() is None:  # two processes under one name: a bug here
            raise RuntimeError(f"h{i} is still running (pid {old.pid}): not starting it twice")
        c = self.config
        log = (c.workdir / f"{self.name(i)}.log").open("ab")
        self.log_at_start[i] = log.tell()
        env = {
            **os.environ,
            ENV_VAR: self.conn,
            "CFP_LOG_JSON": "1",
            "CFP_HTTP_PORT": "0",
            "CFP_LOG_LEVEL": "DEBUG",
            "CFP_TEST_CLOCK_SKEW_S": str(skew_s),
            RUN_MARKER: str(c.workdir),  # inherited by each host's JVM: see `outliving`
        }
        if hold is not None:
            env[HOLD_WRITE_FILE] = str(hold)
        cmd = [
            sys.executable, "-m", "processor", "run",
            "--processor-name", PROCESSOR, "--lease-table", TABLE, "--host-name", self.name(i),
            "--lease-expiration", str(c.expiry_s), "--poll-interval", "0.5",
            "--max-batch-events", "200",
            "--observer", "spark", "--output", c.output.uri,
            *(("--spark-remote", self.remote) if self.remote else
              ("--spark-master", "local[1]", "--spark-conf", "spark.ui.enabled=false")),
            "--spark-warm-up-rows", "0", "--spark-max-wait", "1",
            "--state-interval", str(c.state_interval_s),
            *(("--hints-queue", HINTS_QUEUE, "--no-history", "--hints-poll-interval", "0.5")
              if c.hints else ()),
        ]  # fmt: skip
        self.procs[i] = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        self.stopping.discard(i)

    def exited_on_their_own(self) -> list[str]:
        """Hosts that exited without being told to: a crash the run must report."""
        return [
            f"h{i} exited {p.returncode} on its own (see h{i}.log)"
            for i, p in self.procs.items()
            if p.poll() is not None and i not in self.stopping
        ]

    def spoke(self, i: int) -> bool:
        """Whether host `i` wrote anything since it was last started. Its SIGTERM handler is
        set before its first line: a SIGTERM before it (the interpreter still starting) kills
        it with the signal's default action, which no program can prevent."""
        path = self.config.workdir / f"{self.name(i)}.log"
        return path.stat().st_size > self.log_at_start.get(i, 0)

    def is_up(self, i: int) -> bool:
        """Running and not paused, nor on its way out (a restart of it is pending)."""
        p = self.procs.get(i)
        return (
            p is not None and p.poll() is None and i not in self.paused and i not in self.stopping
        )

    def signal(self, i: int, sig: signal.Signals) -> None:
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.stopping.add(i)
        self.procs[i].send_signal(sig)
        if sig == signal.SIGSTOP:
            self.paused.add(i)
        elif sig == signal.SIGCONT:
            self.paused.discard(i)

    async def wait(self, i: int, timeout_s: float = 60.0) -> int:
        rc = await asyncio.to_thread(self.procs[i].wait, timeout_s)
        self.exit_codes.append((self.name(i), rc))
        return rc

    async def drain(self, i: int) -> tuple[int, float]:
        """Wait for a host told to stop (SIGTERM), as an orchestrator does: up to the grace
        period, then SIGKILL. Its exit code (None: killed) and how long it took."""
        started = time.monotonic()
        try:
            return await self.wait(i, timeout_s=GRACE_S), time.monotonic() - started
        except subprocess.TimeoutExpired:
            self.procs[i].kill()
            await self.wait(i)
            return -signal.SIGKILL, time.monotonic() - started

    def kill_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    def logged(self, *events: str) -> list[dict[str, Any]]:
        """The hosts' JSON log lines of these events (all hosts, across restarts)."""
        wanted = [f'"{e}"' for e in events]
        out = []
        for i in range(self.config.hosts):
            path = self.config.workdir / f"{self.name(i)}.log"
            if not path.exists():
                continue
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{") and any(w in line for w in wanted):
                    with contextlib.suppress(ValueError):
                        found = json.loads(line)
                        if found.get("event") in events:
                            out.append(found)
        return out

    def deliveries(self) -> list[Delivery]:
        out = []
        for e in self.logged("batch.delivering"):
            with contextlib.suppress(KeyError):
                host, lease, epoch = e["host"], e["lease"], e["epoch"]
                first, last = e.get("first", ""), e.get("last", "")
                out.append(Delivery(e["mono"], host, lease, epoch, e["events"], first, last))
        return out


class Workload:
    """The live emulated feed, driven step by step so that Azurite can be restarted between
    steps (`quiet` is held during each step and by a restart)."""

    def __init__(self, conn: str, config: ChaosConfig) -> None:
        self.conn = conn
        self.config = config
        self.quiet = asyncio.Lock()
        self.stop = asyncio.Event()
        self.hints: HintPublisher | None = None

    async def run(self) -> None:
        c = self.config
        emu = EmulatorConfig(
            seed=c.seed, shards=c.shards, block_events=(1, 40), chunk_bytes=64 << 10
        )
        async with (
            BlobServiceClient.from_connection_string(self.conn) as service,
            queue_client(self.conn, HINTS_QUEUE) as queue,
        ):
            if c.hints:
                await queue.create_queue()
                self.hints = HintPublisher(queue, random.Random(c.seed), faults=HINT_FAULTS)
            try:
                await self._segments(Emulator(service, emu, hints=self.hints))
            finally:
                if self.hints is not None:  # what it holds back (late, reordered) goes too
                    await self.hints.aclose()

    async def _segments(self, emulator: Emulator) -> None:
        c = self.config
        per_tick = max(1, round(c.rate))
        async with self.quiet:
            begin = await emulator.setup()
        while True:
            async with self.quiet:
                await emulator.begin_segment(begin)
            started = time.monotonic()
            while not self.stop.is_set() and time.monotonic() - started < c.segment_seconds:
                share = min(0.99, (time.monotonic() - started) / c.segment_seconds)
                async with self.quiet:
                    at = begin + SEGMENT_INTERVAL * share
                    await emulator.perform(per_tick, times=[at] * per_tick)
                    await emulator.flush()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), 1.0)
            async with self.quiet:  # finalized even when stopping: all of it is consumable
                await emulator.finalize_segment(begin + SEGMENT_INTERVAL - timedelta(seconds=1))
            begin += SEGMENT_INTERVAL
            if self.stop.is_set():
                return


@dataclass
class Samples:
    """The lease table and the state job's row, as the runner saw them (monotonic time)."""

    leases: list[tuple[float, Lease]] = field(default_factory=list)
    job: list[tuple[float, Lease]] = field(default_factory=list)


async def _sample(store: TableLeaseStore, samples: Samples, stop: asyncio.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(LeaseError):
            leases = await store.list_leases()
            t = time.monotonic()
            samples.leases.extend((t, x) for x in leases)
            if (job := await store.get(STATE_JOB)) is not None:
                samples.job.append((time.monotonic(), job))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SAMPLE_EVERY_S)


def takeover_times(
    samples: list[tuple[float, Lease]], faults: list[tuple[float, str]]
) -> list[tuple[float, float, str]]:
    """For each (time, host) a host was killed or paused: how long until every lease it owned
    then was owned at a newer epoch (by anyone, itself restarted included), with that fault's
    time and host."""
    out = []
    for t0, host in faults:
        before: dict[str, int] = {}
        for t, x in samples:
            if t <= t0:
                before[x.token] = x.epoch if x.owner == host else -1  # as last seen before t0
        owned = {tok: epoch for tok, epoch in before.items() if epoch >= 0}
        if not owned:
            continue
        pending = dict(owned)
        for t, x in samples:
            if t > t0 and x.token in pending and x.epoch > pending[x.token] and x.owner:
                del pending[x.token]
                if not pending:
                    out.append((t - t0, t0, host))
                    break
    return out


def state_changes(output: Output, conn: str) -> list[tuple[int, str, str, str]]:
    """Every row the state table's commits wrote, as (version, container, blob, sequencer), from
    its change data feed (delta-rs, straight from Azurite's blob port)."""
    options = delta_rs_options(output, storage_access(conn))
    rows = written_rows(output.state, "container", "blob", "sequencer", storage_options=options)
    columns = (rows[n].to_pylist() for n in ("_commit_version", "container", "blob", "sequencer"))
    return [(int(v), c, b, s) for v, c, b, s in zip(*columns, strict=True)]


def change_log_ids(output: Output, conn: str) -> Counter[str]:
    """The change log's ids, as the `deltalake` package (delta-rs) reads the Delta table (on
    Azurite, straight from its blob port: no fault in between)."""
    options = delta_rs_options(output, storage_access(conn)) or None
    try:
        table = DeltaTable(output.changes, storage_options=options)
    except TableNotFoundError:
        return Counter()
    found = QueryBuilder().register("changes", table).execute("SELECT id FROM changes")
    return Counter(pa.table(found).column("id").cast(pa.string()).to_pylist())


STALL_S = 60.0  # a settle this long asks the hosts for their stacks (SIGUSR1)
ZOMBIE_PATIENCE_S = 120.0  # for each step of making the zombie (`zombie.py`)
GRACE_S = 120.0  # deploy/'s grace period after SIGTERM (k8s, compose), then SIGKILL
# events delivered again to observers after the faults (the zombie's aside), of the feed's
DUPLICATES_TARGET = 0.25
COSTLIEST = 3  # lease moves named in the report, by the events they delivered again


class Chaos:
    def __init__(self, config: ChaosConfig) -> None:
        self.config = config
        self.report = Report(config)
        self.azurite = Azurite(config.workdir / "azurite")
        self.started = time.monotonic()
        self.recoveries: list[asyncio.Task[None]] = []
        self.kills: list[tuple[float, str]] = []
        self.faults_ended = self.stopping_at = 0.0
        self.zombie: Zombie | None = None

    def note(self, text: str) -> None:
        self.report.note(self.started, text)
        print(self.report.timeline[-1], flush=True)

    async def run(self) -> Report:
        c = self.config
        c.workdir.mkdir(parents=True, exist_ok=True)
        self.azurite.start()
        blob = await FaultyProxy(self.azurite.blob_port).start()
        table = await FaultyProxy(self.azurite.table_port).start()
        self.proxies = (blob, table)
        direct = self.azurite.connection_string
        self.servers = ChaosServers(c.workdir, c.servers if c.spark == "connect" else 0)
        remote = None
        if self.servers.servers:  # their writes reach Azurite through the proxy: hosts' settings
            await asyncio.to_thread(self.servers.start)
            remote = self.servers.remotes
            self.note(f"cfp spark-connect at {remote}")
        via_proxy = azurite_connection_string(  # the queue straight (its faults: HINT_FAULTS)
            blob_port=blob.port, table_port=table.port, queue_port=self.azurite.queue_port
        )
        self.hosts = Hosts(c, via_proxy, remote)
        self.workload = Workload(direct, c)
        samples = Samples()
        sampling = asyncio.Event()
        try:
            async with TableLeaseStore.from_connection_string(
                direct, table=TABLE, processor=PROCESSOR
            ) as store:
                await store.open()
                workload = asyncio.create_task(self.workload.run())
                sampler = asyncio.create_task(_sample(store, samples, sampling))
                if c.zombie:
                    await self._zombie(store)
                else:
                    for i in range(c.hosts):
                        self.hosts.start(i)
                self.note(f"{c.hosts} hosts started; workload running")
                await self._storm(workload)
                await self._settle(workload, store, direct)
                sampling.set()
                await sampler
        finally:
            self.hosts.kill_all()
            self.report.problems += await asyncio.to_thread(self.servers.stop)
            self.report.abfs = (blob.abfs_cut, blob.abfs_delayed)
            for p in self.proxies:
                await p.close()
            self.azurite.stop()
        self._check(samples)
        return self.report

    async def _storm(self, workload: asyncio.Task[None]) -> None:
        c = self.config
        faults = make_schedule(
            c.seed, duration_s=c.duration_s, hosts=c.hosts, expiry_s=c.expiry_s, kinds=c.kinds
        )
        begin = time.monotonic()
        for fault in faults:
            await asyncio.sleep(max(0.0, begin + fault.at_s - time.monotonic()))
            if workload.done():
                workload.result()  # the workload itself failed: report it
            self._crashes()
            await self._apply(fault)
        await asyncio.sleep(max(0.0, begin + c.duration_s - time.monotonic()))
        self.note("faults stop")
        await asyncio.gather(*self.recoveries)
        self._crashes()
        for p in self.proxies:
            p.heal()
        self.faults_ended = time.monotonic()
        for i in range(c.hosts):
            if i in self.hosts.paused:
                self.hosts.signal(i, signal.SIGCONT)
            if not self.hosts.is_up(i):
                self.hosts.start(i)

    async def _zombie(self, store: TableLeaseStore) -> None:
        """The hosts started, the first of them a zombie with a Spark write in flight, its
        leases fenced by the others meanwhile (`zombie.py`)."""
        c = self.config
        zombie = await start_with_a_zombie(
            self.hosts,
            store,
            c.workdir,
            count=c.hosts,
            patience_s=ZOMBIE_PATIENCE_S,
            note=self.note,
        )
        if zombie is None:
            self.report.problems.append("no zombie with a write in flight could be made")
            return
        self.zombie = zombie
        self.report.applied["zombie"] += 1

    def _crashes(self) -> None:
        for crash in self.hosts.exited_on_their_own():
            if crash not in self.report.problems:
                self.report.problems.append(crash)
                self.note(crash)

    async def _apply(self, fault: Fault) -> None:
        hosts, i = self.hosts, fault.host
        host_fault = fault.kind in ("kill", "pause", "term", "skew")
        if host_fault and not hosts.is_up(i):
            self.note(f"skipped (h{i} is not up): {fault.describe()}")
            return
        if fault.kind == "server" and not self.servers.servers:
            self.note(f"skipped (no Spark Connect server): {fault.describe()}")
            return
        self.note(fault.describe())
        self.report.applied[fault.kind] += 1
        if fault.kind == "kill":
            self.kills.append((time.monotonic(), hosts.name(i)))
            hosts.signal(i, signal.SIGKILL)
            await hosts.wait(i)
            self._later(fault.length_s, lambda: hosts.start(i), f"h{i} restarted")
        elif fault.kind == "pause":
            self.kills.append((time.monotonic(), hosts.name(i)))
            hosts.signal(i, signal.SIGSTOP)
            self._later(fault.length_s, lambda: hosts.signal(i, signal.SIGCONT), f"h{i} resumed")
        elif fault.kind in ("term", "skew"):
            hosts.signal(i, signal.SIGTERM)
            skew = fault.skew_s
            self.recoveries.append(asyncio.create_task(self._restart(i, fault.length_s, skew)))
        elif fault.kind == "azurite":
            self.recoveries.append(asyncio.create_task(self._restart_azurite(fault.length_s)))
        elif fault.kind == "drop":
            for p in self.proxies:
                p.drop(fault.length_s)
        elif fault.kind == "delay":
            for p in self.proxies:
                p.delay(fault.skew_s, fault.length_s)
        elif fault.kind == "server":
            self.recoveries.append(asyncio.create_task(self.servers.fault(fault, self.note)))

    def _later(self, delay_s: float, action: object, text: str) -> None:
        async def later() -> None:
            await asyncio.sleep(delay_s)
            assert callable(action)
            action()
            self.note(text)

        self.recoveries.append(asyncio.create_task(later()))

    async def _restart(self, i: int, delay_s: float, skew_s: float) -> None:
        spoke = self.hosts.spoke(i)  # before the signal's effects are logged
        rc, took = await self.hosts.drain(i)
        self.report.drains.append(took)
        before_its_handler = rc == -signal.SIGTERM and not spoke
        if rc != 0 and took <= GRACE_S and not before_its_handler:
            self.report.problems.append(f"h{i} exited {rc} on SIGTERM")
        await asyncio.sleep(delay_s)
        self.hosts.start(i, skew_s=skew_s)
        self.note(f"h{i} restarted (wall clock {skew_s:+.0f}s)")

    async def _restart_azurite(self, down_s: float) -> None:
        async with self.workload.quiet:  # no blob operation is cut in half
            self.azurite.stop()
            await asyncio.sleep(down_s)
            await asyncio.to_thread(self.azurite.start)
        self.note("azurite restarted")

    async def _settle(
        self, workload: asyncio.Task[None], store: TableLeaseStore, direct: str
    ) -> None:
        c = self.config
        self.workload.stop.set()
        await workload
        output = c.output
        records, _ = await read_all(direct)
        feed_ids = {str(r["id"]) for r in records}
        self.report.events = len(feed_ids)
        self.note(f"workload stopped: {len(feed_ids):,} events; waiting for the hosts")
        started = time.monotonic()
        deadline = started + c.settle_s
        asked_for_stacks = False
        while True:
            leases = await store.list_leases()
            done = leases and all(x.caught_up for x in leases)
            if done and feed_ids <= set(await asyncio.to_thread(change_log_ids, output, direct)):
                break
            if time.monotonic() > deadline:
                behind = [f"{x.token}@{x.owner}" for x in leases if not x.caught_up]
                self.report.problems.append(
                    f"not caught up within {c.settle_s:g}s (not caught up: {behind or 'none'})"
                )
                break
            if not asked_for_stacks and time.monotonic() - started > STALL_S:
                # a stalled settle: every host logs where each of its tasks waits (stacks.py)
                for i in range(c.hosts):
                    if self.hosts.is_up(i):
                        self.hosts.signal(i, signal.SIGUSR1)
                self.note(f"not caught up after {STALL_S:g}s: the hosts log their stacks")
                asked_for_stacks = True
            await asyncio.sleep(1.0)
        self.report.settle_s = time.monotonic() - started
        names = {self.hosts.name(i) for i in range(c.hosts)}
        at_rest: list[str] = []
        for _ in range(int(6 * c.expiry_s)):
            at_rest = rest_problems(await store.list_leases(), names)
            if not at_rest:
                break
            await asyncio.sleep(1.0)
        self.report.problems += at_rest
        self.note("caught up; stopping the hosts")
        self.stopping_at = time.monotonic()
        for i in range(c.hosts):
            self.hosts.signal(i, signal.SIGTERM)
        for i in range(c.hosts):
            rc, took = await self.hosts.drain(i)
            self.report.drains.append(took)
            if rc != 0:
                self.report.problems.append(f"h{i} exited {rc} at the end")
        self.report.problems += exactly_once(feed_ids, change_log_ids(output, direct))
        verify = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "processor", "verify", "--output", output.uri, "--json"],
            capture_output=True, text=True, cwd=ROOT, env={**os.environ, ENV_VAR: direct},
        )  # fmt: skip
        if verify.returncode != 0:
            self.report.problems.append(f"cfp verify: {verify.stdout[-1500:]}{verify.stderr}")
        elif c.hints and (left := json.loads(verify.stdout).get("provisional")):
            self.report.problems.append(f"cfp verify: {left} rows still provisional at rest")
        if c.hints:
            self.report.problems += sequencer_regressions(state_changes(output, direct))
            self.report.hints = self._hint_counts()
        if left := await outliving(c.workdir):
            self.report.problems.append(f"processes outlived their hosts: {left}")

    def _hint_counts(self) -> str:
        """The publisher's faults, and the hosts' totals as each logged them when it stopped."""
        given = self.workload.hints.counts if self.workload.hints else Counter()
        taken: Counter[str] = Counter()
        for e in self.hosts.logged("hints.stopped"):
            taken.update({k: int(v) for k, v in e.items() if isinstance(v, int)})
        return (
            f"{given['events']:,} events sent ({given['dropped']:,} dropped, "
            f"{given['duplicated']:,} twice, {given['late']:,} late, {given['reordered']:,} out "
            f"of order, {given['poison']:,} poison beside them); the hosts, as they logged on stopping: "
            + ", ".join(f"{k} {n:,}" for k, n in sorted(taken.items()))
        )

    def _check(self, samples: Samples) -> None:
        deliveries = self.hosts.deliveries()
        self.report.delivered = sum(d.events for d in deliveries)
        self.report.costliest = [
            f"lease {m.lease} {m.before} -> {m.after} at [{m.mono - self.started:.1f}s]: "
            f"{m.events:,}"
            for m in redeliveries(deliveries)[:COSTLIEST]
        ]
        self.report.moves = _moves(self.hosts.logged)
        self.report.problems += backward_moves(samples.leases)
        self.report.problems += late_deliveries(deliveries)
        takeovers = takeover_times(samples.leases, self.kills)
        self.report.takeovers = [took for took, _, _ in takeovers]
        if takeovers:
            _, at, host = max(takeovers)
            self.report.longest_takeover = f"{host}'s, faulted at [{at - self.started:.1f}s]"
        failures = ("spark.write_failed", "job.failed", "job.ran")
        self.report.failed_writes = Counter(str(e["event"]) for e in self.hosts.logged(*failures))
        # a holder renews every third of the expiry; a dead one's lease runs out after one
        # expiry and is taken within the next: longer than two unwritten means stuck
        self.report.problems += job_stalls(
            samples.job,
            since=self.faults_ended,
            until=self.stopping_at,
            limit_s=2 * self.config.expiry_s,
        )
        if not deliveries:
            self.report.problems.append("no batch.delivering lines in the host logs")
        if self.zombie is not None:
            self.report.staged = self.zombie.staged(deliveries, self.hosts.logged)

        if self.servers.losses:
            self.report.servers = self.servers.report(self.hosts.logged)
        if self.zombie is not None:
            found = self.zombie.problems(self.hosts.logged)
            self.report.problems += found
            self.report.zombie = f"{self.zombie.host}, leases {', '.join(self.zombie.leases)}: " + (
                "not refused (see FAILED)"
                if found
                else "its append refused by Delta (spark.fenced)"
            )


def _moves(logged: Callable[..., list[dict[str, Any]]]) -> str:
    """The acquisitions, and how many were of a lease the same host had before (a store outage
    fenced it): those that waited for the earlier worker read nothing it wrote again."""
    acquired = logged("lease.acquired")
    own = sum(1 for e in acquired if e.get("was") == e.get("host"))
    waited = len(logged("worker.waiting_for_earlier"))
    asked = len(logged("lease.handover_requested"))
    return (
        f"{len(acquired)} acquisitions: {own} taken again by the host that had them ({waited} "
        f"waited for its earlier worker); {asked} hand-overs asked for"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SEED", "1")))
    parser.add_argument("--duration", type=float, default=float(os.environ.get("DURATION", "60")))
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--expiry", type=float, default=4.0)
    parser.add_argument("--kinds", default=",".join(KINDS), help="fault kinds, comma-separated")
    parser.add_argument("--workdir", type=Path, help="default: a fresh temporary folder")
    parser.add_argument(
        "--tables",
        choices=("abfs", "local"),
        default="abfs",
        help="where the hosts write the Delta tables: Azurite's blob storage (through the faults) "
        "or a local folder",
    )
    parser.add_argument(
        "--spark",
        choices=("connect", "embedded"),
        default="connect",
        help="the hosts write through one `cfp spark-connect` server (thin hosts, no JVM each), "
        "or each through its own embedded Spark",
    )
    parser.add_argument(
        "--servers",
        type=int,
        default=ChaosConfig.servers,
        help="Spark Connect servers the thin hosts write through (--spark-remote a,b,...): the "
        "`server` faults kill one or all of them",
    )
    parser.add_argument(
        "--state-interval",
        type=float,
        default=ChaosConfig.state_interval_s,
        help="the hosts' --state-interval: often by default, so that the faults meet the state "
        "job's reads and MERGEs too",
    )
    parser.add_argument(
        "--no-hints",
        action="store_true",
        help="leave out the hints queue (and its faults) beside the feed",
    )
    parser.add_argument(
        "--no-zombie",
        action="store_true",
        help="leave out the host paused with its Spark write in flight before the storm",
    )
    args = parser.parse_args(argv)
    quick_jvms()  # as in `make test`: four hosts' JVMs share two cores
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="cfp-chaos-"))
    config = ChaosConfig(
        workdir=workdir,
        seed=args.seed,
        duration_s=args.duration,
        hosts=args.hosts,
        expiry_s=args.expiry,
        kinds=tuple(k for k in args.kinds.split(",") if k),
        tables=args.tables,
        zombie=not args.no_zombie,
        spark=args.spark,
        servers=args.servers,
        state_interval_s=args.state_interval,
        hints=not args.no_hints,
    )
    print(f"chaos: seed {config.seed}, work folder {workdir}", flush=True)
    try:
        report = asyncio.run(Chaos(config).run())
    except (FeedError, LeaseError) as e:
        print(f"chaos: the run itself failed: {e!r}", file=sys.stderr)
        return 1
    print(report.render(), flush=True)
    return 1 if report.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
