"""Real `cfp run` host processes for the integration tests, and what they left behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leases import Lease, LeaseError, TableLeaseStore
from processor.connection import ENV_VAR
from processor.emulator.azurite import ROOT
from processor.reading.lease_position import LeasePosition
from tests import patience
from tests.helpers import get_text, metric, run_cfp

LEASE_TABLE = "cfptestleases"
OUR_CODE = ("/processor/", "/observers/", "/leases/")
LIVE: list[Cluster] = []  # the clusters of the running test, for `diagnose` when it fails


@dataclass
class Cluster:
    """Hosts of one processor. Host logs go to `workdir/NAME.log`, deliveries to `workdir/out`."""

    conn: str
    processor: str
    workdir: Path
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    exited: dict[str, int] = field(default_factory=dict)
    _tails: dict[Path, _Tail] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        LIVE.append(self)

    @property
    def out(self) -> Path:
        return self.workdir / "out"

    def start(self, name: str, *extra: str, skew_s: float = 0, **env: str) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = (self.workdir / f"{name}.log").open("ab")
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            ENV_VAR: self.conn,
            "CFP_TEST_OUT": str(self.out),
            "CFP_TEST_CLOCK_SKEW_S": str(skew_s),
            "CFP_LOG_JSON": "1",
            "CFP_HTTP_PORT": "0",  # several hosts on one machine: any free port each
            **self.env,
            **env,
        }
        cmd = [
            sys.executable, "-m", "processor", "run",
            "--processor-name", self.processor,
            "--lease-table", LEASE_TABLE,
            "--host-name", name,
            *self.args,
            *extra,
        ]  # fmt: skip
        self.procs[name] = subprocess.Popen(
            cmd, cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT
        )

    def signal(self, name: str, sig: signal.Signals) -> None:
        self.procs[name].send_signal(sig)

    def wait(self, name: str) -> int:
        """Host `name`'s exit status, once it exits (as long as the test may wait)."""
        rc = self.procs[name].wait(timeout=patience.left_s())
        self.exited[name] = rc
        return rc

    def stop_all(self) -> dict[str, int]:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)  # a paused host must be able to drain
                p.send_signal(signal.SIGTERM)
        return {name: self.wait(name) for name in self.procs}

    def kill_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    def running(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def store(self) -> TableLeaseStore:
        return TableLeaseStore.from_connection_string(
            self.conn, table=LEASE_TABLE, processor=self.processor
        )

    def cfp(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`cfp ARGS` on this processor's leases (`--processor-name`, `--lease-table` added)."""
        return run_cfp(
            self.conn, *args, "--processor-name", self.processor, "--lease-table", LEASE_TABLE
        )

    def status(self) -> dict[str, Any]:
        """`cfp status --json`, which must succeed."""
        result = self.cfp("status", "--json")
        assert result.returncode == 0, result.stderr
        doc: dict[str, Any] = json.loads(result.stdout)
        return doc

    async def run_until_caught_up(self, name: str, *extra: str) -> int:
        """Start host `name` with `--until-caught-up` and wait for its exit status."""
        self.start(name, "--until-caught-up", *extra)
        return await asyncio.to_thread(self.wait, name)

    def delivered(self) -> Counter[str]:
        """How many times each event id was delivered."""
        return Counter(d["id"] for d in self.deliveries())

    def deliveries(self) -> list[dict[str, Any]]:
        """Every delivered event, ordered by delivery time (then by line within its file). A
        line a host is still writing (no newline yet) is left for the next call."""
        lines = [doc for path in sorted(self.out.glob("*.jsonl")) for doc in self._read(path)]
        lines.sort(key=lambda d: (d["t"], d["host"], d["_line"]))
        return lines

    async def logged(self, name: str, event: str, *, since: int = 0, **fields: object) -> float:
        """Wait until host `name` has logged `event` (with these `fields`, if any) among its log
        lines after the first `since` (a host started again appends to the same log); the
        monotonic time it was seen."""

        def matches(e: dict[str, Any]) -> bool:
            return e.get("event") == event and all(e.get(k) == v for k, v in fields.items())

        deadline = patience.deadline()
        while not any(matches(e) for e in self.log_events(name)[since:]):
            assert time.monotonic() < deadline, f"{name} never logged {event} {fields or ''}"
            await asyncio.sleep(0.05)
        return time.monotonic()

    async def endpoint(self, name: str, *, since: int = 0) -> str:
        """The base URL of host `name`'s HTTP endpoints (it logs `http.listening`), of the run
        that logged after its first `since` log lines."""
        await self.logged(name, "http.listening", since=since)
        return next(
            str(e["url"])
            for e in self.log_events(name)[since:]
            if e.get("event") == "http.listening"
        )

    async def ticks(self, name: str, *, since: int = 0) -> int:
        """How many balancing ticks host `name` (its run after its first `since` log lines) has
        made: one lease-table listing each."""
        url = await self.endpoint(name, since=since)
        return round(
            metric(await asyncio.to_thread(get_text, f"{url}/metrics"), "cfp_lease_listings_total")
        )

    def diagnose(self, *, within_s: float = 5.0) -> str:
        """Where the running hosts wait (SIGUSR1 makes them log it), in our code's frames, and
        each host's last log lines: for the report of a test that timed out."""
        names = self.running()
        before = {name: self._stacks_logged(name) for name in names}
        for name in names:
            self.signal(name, signal.SIGUSR1)
        # a host too wedged to answer is reported as is
        deadline = time.monotonic() + within_s  # fixed on purpose: a failed test's report
        while time.monotonic() < deadline and any(
            self._stacks_logged(n) == before[n] for n in names
        ):
            time.sleep(0.05)
        out = []
        for name in self.procs:
            events = self.log_events(name)
            stacks = [e for e in events if e.get("event") == "host.stacks"]
            out.append(f"--- {name} ({'running' if name in names else 'exited'})")
            for e in events[-15:]:
                if e.get("event") != "host.stacks":
                    out.append(json.dumps(e)[:300])
            last = stacks[-1] if stacks else {"tasks": {}, "threads": {}}
            for task, frames in last["tasks"].items():
                ours = [f.rsplit("/", 1)[-1] for f in frames if any(c in f for c in OUR_CODE)]
                if ours:  # with the innermost frame, ours or not (a thread, a future)
                    inner = frames[-1].rsplit("/", 1)[-1]
                    out.append(f"task {task}: {' > '.join([*ours[-4:], inner])}")
            for thread, frames in last["threads"].items():
                out.append(
                    f"thread {thread}: {' > '.join(f.rsplit('/', 1)[-1] for f in frames[-4:])}"
                )
        return "\n".join(out)

    def _stacks_logged(self, name: str) -> int:
        return sum(1 for e in self.log_events(name) if e.get("event") == "host.stacks")

    def log_events(self, name: str) -> list[dict[str, Any]]:
        return list(self._read(self.workdir / f"{name}.log"))

    def _read(self, path: Path) -> list[dict[str, Any]]:
        """The JSON lines of a file hosts append to, parsed once each: tests poll these files
        many times a second, and parsing them whole each time cost a core on a loaded machine.
        Lines that are not JSON (a traceback) are left out."""
        tail = self._tails.setdefault(path, _Tail())
        with path.open("rb") as f:
            if f.seek(0, os.SEEK_END) < tail.offset:  # made anew: start over
                tail.offset, tail.docs = 0, []
            f.seek(tail.offset)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        tail.offset += len(complete)
        for text in complete.splitlines():
            try:
                doc = json.loads(text)
            except ValueError:
                continue
            if isinstance(doc, dict):
                doc["_line"] = len(tail.docs)
                tail.docs.append(doc)
        return tail.docs


@dataclass
class _Tail:
    offset: int = 0
    docs: list[dict[str, Any]] = field(default_factory=list)


def quick_host_args(
    *, batch: int, expiry_s: float = 3.0, observer: str = "tests.plugins:PacedJsonl"
) -> tuple[str, ...]:
    """`cfp run` flags of the host tests: short intervals (renew and balance every second)."""
    return (
        "--lease-expiration", str(expiry_s),
        "--renew-interval", "1",
        "--acquire-interval", "1",
        "--poll-interval", "0.3",
        "--max-batch-events", str(batch),
        "--observer", observer,
    )  # fmt: skip


def owners(leases: list[Lease]) -> Counter[str]:
    return Counter(lease.owner for lease in leases if lease.owner is not None)


def is_balanced(leases: list[Lease], hosts: set[str]) -> bool:
    """Every lease owned by one of `hosts`, and their counts differ by at most one."""
    if not leases or any(lease.owner not in hosts for lease in leases):
        return False
    counts = [owners(leases).get(h, 0) for h in hosts]
    return max(counts) - min(counts) <= 1


def all_caught_up(leases: list[Lease]) -> bool:
    return bool(leases) and all(lease.caught_up for lease in leases)


def order_violations(
    deliveries: list[dict[str, Any]], feed_order: dict[str, list[str]]
) -> list[str]:
    """Blobs whose events were first delivered out of their feed order."""
    rank = {eid: i for ids in feed_order.values() for i, eid in enumerate(ids)}
    last: dict[str, int] = {}
    seen: set[str] = set()
    bad: list[str] = []
    for d in deliveries:
        if d["id"] in seen:
            continue
        seen.add(d["id"])
        r = rank[d["id"]]
        if r < last.get(d["subject"], -1):
            bad.append(d["subject"])
        last[d["subject"]] = r
    return bad


class ContinuationWatch:
    """Samples the lease table and records any continuation that moved backwards."""

    def __init__(self) -> None:
        self.best: dict[str, LeasePosition] = {}
        self.backwards: list[str] = []
        self.samples = 0
        self.epochs: dict[str, list[int]] = defaultdict(list)

    def sample(self, leases: list[Lease]) -> None:
        self.samples += 1
        for lease in leases:
            pos = LeasePosition.from_json(lease.continuation, lease=lease.token)
            before = self.best.get(lease.token)
            if before is not None and pos.is_before(before):
                self.backwards.append(f"{lease.token}: {before} -> {pos}")
            else:
                self.best[lease.token] = pos
            if not self.epochs[lease.token] or self.epochs[lease.token][-1] != lease.epoch:
                self.epochs[lease.token].append(lease.epoch)


def now() -> float:
    return time.monotonic()


class Table:
    """The test's own view of the lease table, sampled while hosts run."""

    def __init__(self, store: TableLeaseStore) -> None:
        self.store = store
        self.watch = ContinuationWatch()
        # one listing at a time: a listing (a query per lease partition) that started earlier
        # but ended later than another would look like continuations moving back
        self._listing = asyncio.Lock()

    async def leases(self) -> list[Lease]:
        async with self._listing:
            rows = await self.store.list_leases()
            self.watch.sample(rows)
        return rows

    async def until(self, check: Callable[[list[Lease]], bool], *, what: str) -> float:
        """Poll until `check(leases)` holds, as long as the test may wait; returns the monotonic
        time it was first seen."""
        deadline = patience.deadline()
        while time.monotonic() < deadline:
            if check(await self.leases()):
                return time.monotonic()
            await asyncio.sleep(0.1)
        rows = await self.leases()
        raise AssertionError(f"timed out waiting for {what}: {[(r.token, r.owner) for r in rows]}")


@contextlib.asynccontextmanager
async def sampled(store: TableLeaseStore, *, every_s: float = 0.2) -> AsyncIterator[Table]:
    """The lease table, sampled every `every_s` while the block runs, so that a continuation
    moving back is seen; a listing that fails (storage down on purpose) is skipped."""
    view = Table(await store.open())

    async def sample() -> None:
        while True:
            with contextlib.suppress(LeaseError):
                await view.leases()
            await asyncio.sleep(every_s)

    sampler = asyncio.create_task(sample())
    try:
        yield view
    finally:
        sampler.cancel()  # and ended before the store closes under it
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
