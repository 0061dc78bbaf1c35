"""`make demo`: the main job, on this machine, end to end, in about two minutes.

1. Azurite and a Spark Connect server start on loopback (data under `.demo/`).
2. A live emulated workload appends real blob operations; a new hourly segment every few seconds,
   with shard counts cycling 3, 6, 4 (so leases appear as the feed grows). As on Azure, each
   record reaches the feed `PUBLISH_DELAY_S` after its operation (Azure's few minutes, shortened),
   while its Blob Storage event goes at once into an Azurite queue, as an Event Grid subscription
   would put it there (a few dropped, a few twice).
3. Three `cfp run` hosts with the Spark observer share the leases through the lease table and
   write the Delta change log through the one Spark Connect server, into Azurite's blob storage
   (ABFS, container `cfp-tables`); the host holding the state job's lease MERGEs the new
   change-log commits into the current-state table every few seconds. With `--hints-queue` the
   hosts also read the queue and the state job folds its hints in every 2 s: the state table is
   seconds behind the operations, the change log the feed's delay.
4. Midway, one host is killed with SIGKILL and a fourth one starts: the killed host's leases are
   taken over after one lease expiry, and the batches it had in hand are delivered again (the
   change log still holds each event once).
5. The workload stops (its last segment finalized); the hosts catch up and drain on SIGTERM.
6. `cfp verify` compares the state table with a live listing of the account, and `cfp sql` runs a
   query over the tables, shows the change log's history and reads an old version of it. Everything
   started is stopped; the tables stay in Azurite's data under `.demo/azurite`.

The terminal shows the hosts and leases as the lease table and each host's `/status` see them,
with how fresh each is: the ages of a host's events when accepted (feed and hints), of each lease's
newest event, and of the newest event in the change log and in the state table.
Exit status 0 only when every event is in the change log and `cfp verify` reports EQUAL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Generic, TypeVar

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp  # noqa: E402
import pyarrow as pa  # noqa: E402
from azure.storage.blob.aio import BlobServiceClient  # noqa: E402
from deltalake import DeltaTable, QueryBuilder  # noqa: E402
from deltalake.exceptions import TableNotFoundError  # noqa: E402
from demo_view import Rates, Snapshot, TablesNow, View, render, snapshots  # noqa: E402
from rich.console import Console  # noqa: E402

from leases import TableLeaseStore  # noqa: E402
from observers.builtin.spark.session.output import delta_rs_options, parse_output  # noqa: E402
from processor.changefeed.feed_reader import FeedReader  # noqa: E402
from processor.changefeed.storage.feed_storage import FeedStorage  # noqa: E402
from processor.connection import queue_client, storage_access  # noqa: E402
from processor.emulator.azurite import Azurite, free_port  # noqa: E402
from processor.emulator.emulator import Emulator, EmulatorConfig  # noqa: E402
from processor.emulator.hint_publisher import HintFaults, HintPublisher  # noqa: E402
from processor.logs import configure_logging  # noqa: E402

WORKDIR = ROOT / ".demo"
PROCESSOR, TABLE = "demo", "cfpdemo"
EXPIRY_S = 6.0
WORKLOAD_S = 50.0  # the workload runs this long after the hosts start
KILL_AT_S = 18.0  # after the hosts start, once h2 owns a lease
DISTINCT_EVERY_S = 5.0  # how often the headline counts the change log's distinct events
FRESHNESS_EVERY_S = 2.0  # how often the tables' newest events are looked up
KILL_BY_S = 30.0  # ... or at the latest
SEGMENT_S = 10.0  # real seconds per virtual hourly segment
RATE = 60.0  # blob operations per second
PUBLISH_DELAY_S = 20.0  # a record reaches the feed this long after its operation
HINTS_QUEUE = "demo-hints"
HINT_FAULTS = HintFaults(drop=0.05, duplicate=0.05)  # the feed fills gaps; repeats do nothing
CATCH_UP_WITHIN_S = 120.0
OUTPUT = parse_output("abfs://cfp-tables@devstoreaccount1.dfs.core.windows.net/demo")
QUERY = (
    "SELECT container, count(*) AS blobs, sum(content_length) AS bytes "
    "FROM live GROUP BY container ORDER BY container"
)
HISTORY = (
    "SELECT version, operation, operationMetrics['numTargetRowsInserted'] AS inserted "
    "FROM changes_history ORDER BY version DESC LIMIT 5"
)
TIME_TRAVEL = "SELECT count(*) AS events_at_version_1 FROM {changes} VERSION AS OF 1"
CFP = str(Path(sys.executable).parent / "cfp")
T = TypeVar("T")

console = Console(highlight=False)
if not console.is_terminal:
    console = Console(highlight=False, width=110)


class Throttled(Generic[T]):
    """The last result of a read of the tables (`deltalake`, in a thread), read again every
    `every_s` at most; None before the first that worked (before the hosts made the tables, or
    their container even, there is nothing to read)."""

    def __init__(self, read: Callable[[], T], every_s: float) -> None:
        self._read, self._every_s = read, every_s
        self._value: T | None = None
        self._at = float("-inf")

    async def get(self) -> T | None:
        if time.monotonic() - self._at >= self._every_s:
            self._at = time.monotonic()
            with contextlib.suppress(OSError):
                self._value = await asyncio.to_thread(self._read)
        return self._value


class Demo:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.azurite = Azurite(WORKDIR / "azurite")
        self.spark_port = free_port()
        self.spark: subprocess.Popen[bytes] | None = None
        self.hosts: dict[str, subprocess.Popen[bytes]] = {}
        self.notes: list[str] = []
        # the change log's distinct events; its newest event and the state table's
        self.distinct = Throttled(lambda: len(set(self.logged_ids())), DISTINCT_EVERY_S)
        self.freshness = Throttled(self.tables_now, FRESHNESS_EVERY_S)

    @property
    def remote(self) -> str:
        return f"sc://127.0.0.1:{self.spark_port}"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CFP_CONNECTION_STRING": self.azurite.connection_string}

    def say(self, text: str) -> None:
        console.print(f"[{time.monotonic() - self.started:5.1f}s] {text}")

    def note(self, text: str) -> None:
        """An event of the demo: under the live view on a terminal; elsewhere (a log file)
        printed once, as it happens, between the tables printed now and then."""
        line = f"[{time.monotonic() - self.started:5.1f}s] {text}"
        self.notes.append(line)
        if not console.is_terminal:
            console.print(line, markup=False)

    # --- the pieces -------------------------------------------------------------------------

    def start_spark_connect(self) -> None:
        log = (WORKDIR / "spark-connect.log").open("wb")
        self.spark = subprocess.Popen(
            [
                CFP, "spark-connect", "--port", str(self.spark_port), "--spark-master", "local[2]",
                "--log-dir", str(WORKDIR / "spark-logs"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )  # fmt: skip

    async def spark_ready(self) -> None:
        deadline = time.monotonic() + 150
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.spark_port), timeout=0.5),
            ):
                return
            assert self.spark is not None
            if self.spark.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Spark Connect did not start: see {WORKDIR}/spark-connect.log")
            await asyncio.sleep(0.3)

    def start_host(self, name: str) -> None:
        log = (WORKDIR / f"{name}.log").open("ab")
        self.hosts[name] = subprocess.Popen(
            [
                CFP, "--log-json", "run",
                "--processor-name", PROCESSOR, "--lease-table", TABLE, "--host-name", name,
                "--observer", "spark", "--spark-remote", self.remote,
                "--output", OUTPUT.uri, "--state-interval", "5",
                "--hints-queue", HINTS_QUEUE, "--no-history",
                "--lease-expiration", str(EXPIRY_S), "--poll-interval", "1",
                "--http-port", "0",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )  # fmt: skip
        self.note(f"{name} started (pid {self.hosts[name].pid})")

    async def workload(self, stop: asyncio.Event) -> int:
        config = EmulatorConfig(
            seed=2026,
            # hourly segments from a few hours ago: the event-time lag shown is then real
            start_time=datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
            - timedelta(hours=6),
            shards=(3, 6, 4),
            block_events=(1, 40),
            chunk_bytes=256 << 10,
        )
        conn = self.azurite.connection_string
        async with (
            BlobServiceClient.from_connection_string(conn) as service,
            queue_client(conn, HINTS_QUEUE) as queue,
        ):
            await queue.create_queue()
            hints = HintPublisher(
                queue, random.Random(7), faults=HINT_FAULTS, feed_delay_s=PUBLISH_DELAY_S
            )
            emulator = Emulator(service, config, hints=hints, publish_delay_s=PUBLISH_DELAY_S)
            try:  # event times from the wall clock (what freshness is measured against)
                summary = await emulator.run_live(
                    stop, rate_per_s=RATE, segment_seconds=SEGMENT_S, finish=True,
                    wall_clock=True, real_hours=False,
                )  # fmt: skip
            finally:
                await hints.aclose()
        return len(summary.segments)

    async def feed_ids(self) -> set[str]:
        ids: set[str] = set()
        async with (
            FeedStorage.from_connection_string(self.azurite.connection_string) as storage,
            FeedReader(storage) as reader,
        ):
            async for batch in reader.batches():
                ids.update(str(r["id"]) for r in batch.records)
        return ids

    def show(
        self,
        view: View,
        snap: Snapshot,
        rates: Rates,
        headline: str,
        distinct: int | None,
        *,
        force: bool = False,
    ) -> None:
        notes = view.notes_to_draw(self.notes)
        frame = render(snap, rates, headline=headline, notes=notes, distinct=distinct, final=force)
        view.show(frame, force=force)

    def logged_ids(self) -> list[str]:
        """The change log's ids, as the `deltalake` package reads them from Azurite."""
        options = delta_rs_options(OUTPUT, storage_access(self.azurite.connection_string))
        try:
            table = DeltaTable(OUTPUT.changes, storage_options=options)
        except TableNotFoundError:
            return []
        found = QueryBuilder().register("changes", table).execute("SELECT id FROM changes")
        return pa.table(found).column("id").cast(pa.string()).to_pylist()

    def tables_now(self) -> TablesNow:
        """The newest event time in the change log and in the state table, and the state
        table's provisional rows."""
        options = delta_rs_options(OUTPUT, storage_access(self.azurite.connection_string))
        query = QueryBuilder()
        try:
            query.register("changes", DeltaTable(OUTPUT.changes, storage_options=options))
            state_table = DeltaTable(OUTPUT.state, storage_options=options)
        except TableNotFoundError:
            return TablesNow()
        query.register("state", state_table)
        # a state table is made first, then given its hint columns (ALTER TABLE)
        hinted = "provisional" in {f.name for f in state_table.schema().fields}
        provisional = "sum(CASE WHEN provisional THEN 1 ELSE 0 END)" if hinted else "0"
        logged = pa.table(query.execute("SELECT max(event_time) AS t FROM changes"))
        state = pa.table(query.execute(
            f"SELECT max(event_time) AS t, {provisional} AS provisional FROM state"
        ))  # fmt: skip
        return TablesNow(
            changes=logged["t"][0].as_py(),
            state=state["t"][0].as_py(),
            provisional=int(state["provisional"][0].as_py() or 0),
        )

    def cfp(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [CFP, "--log-level", "WARNING", *args],
            check=False,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    # --- the run ----------------------------------------------------------------------------

    async def run(self) -> int:
        self.azurite.start()
        self.say(
            f"Azurite on 127.0.0.1 (blob :{self.azurite.blob_port}, "
            f"table :{self.azurite.table_port})"
        )
        self.start_spark_connect()
        self.say(f"Spark Connect server starting on {self.remote} (local[2])")
        stop_workload = asyncio.Event()
        workload = asyncio.create_task(self.workload(stop_workload))
        self.say(
            f"workload: {RATE:g} blob operations/s, a new segment every {SEGMENT_S:g}s, "
            f"shard counts 3, 6, 4; records in the feed {PUBLISH_DELAY_S:g}s after their "
            f"operations, Blob Storage events in queue {HINTS_QUEUE} at once "
            f"({HINT_FAULTS.drop:.0%} dropped, {HINT_FAULTS.duplicate:.0%} twice)"
        )
        await self.spark_ready()
        self.say("Spark Connect ready; starting 3 hosts")
        for name in ("h1", "h2", "h3"):
            self.start_host(name)
        hosts_at = time.monotonic()
        killed = stopped = False
        feed: set[str] | None = None
        # a frame's rate spans the time since the frame before it (30 s apart in a log file)
        rates = Rates(window_s=10.0 if console.is_terminal else 30.0)
        snap = None

        def owns(host: str) -> bool:
            return snap is not None and any(x.owner == host for x in snap.leases)

        async with (
            TableLeaseStore.from_connection_string(
                self.azurite.connection_string, table=TABLE, processor=PROCESSOR
            ) as store,
            aiohttp.ClientSession() as http,
        ):
            await store.open()
            with View(console) as view:
                while True:
                    now = time.monotonic() - hosts_at
                    if not killed and now >= KILL_AT_S and (owns("h2") or now >= KILL_BY_S):
                        self.hosts["h2"].send_signal(signal.SIGKILL)
                        self.note(f"kill -9 h2: its leases wait out the {EXPIRY_S:g}s expiry")
                        self.start_host("h4")
                        killed = True
                    if not stopped and now >= WORKLOAD_S:
                        stop_workload.set()
                        stopped = True
                        self.note("workload stopping; its last segment is finalized")
                    if workload.done() and feed is None:
                        segments = workload.result()
                        feed = await self.feed_ids()
                        self.note(f"workload done: {segments} segments, {len(feed):,} events")
                    snap = await snapshots(store, http)
                    headline = f"t+{time.monotonic() - self.started:5.1f}s"
                    distinct = await self.distinct.get()
                    snap_tables = await self.freshness.get()
                    if snap is not None:
                        snap.tables = snap_tables
                        rates.update(snap)
                        self.show(view, snap, rates, headline, distinct)
                        if (
                            feed is not None
                            and snap.leases
                            and all(x.caught_up for x in snap.leases)
                            and feed <= set(await asyncio.to_thread(self.logged_ids))
                        ):
                            self.note("every event is in the change log: caught up")
                            self.show(view, snap, rates, headline, len(feed), force=True)
                            break
                    if now > WORKLOAD_S + CATCH_UP_WITHIN_S:
                        raise RuntimeError("the hosts did not catch up in time (see .demo/*.log)")
                    await asyncio.sleep(0.5)
        assert feed is not None
        return await self.finish(feed)

    async def finish(self, feed: set[str]) -> int:
        for proc in self.hosts.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {n: await asyncio.to_thread(p.wait, 60) for n, p in self.hosts.items()}
        self.say(
            "hosts stopped with SIGTERM (drained, leases released): "
            + ", ".join(f"{n} exit {c}" for n, c in codes.items())
        )
        logged = await asyncio.to_thread(self.logged_ids)
        once = len(logged) == len(set(logged))
        self.say(
            f"change log ({OUTPUT.changes}): {len(set(logged)):,} events of {len(feed):,} in "
            f"the feed, {'each once' if once else 'SOME TWICE'} (read with the deltalake package)"
        )
        self.say("cfp verify (the state table against a live listing of the account):")
        verify = await asyncio.to_thread(self.cfp, "verify", "--output", OUTPUT.uri)
        console.print(verify.stdout.rstrip() or verify.stderr.rstrip(), markup=False)
        codes_ok = [verify.returncode]
        for title, query in (
            ("the live blobs by container", QUERY),
            ("the change log's last commits (DESCRIBE HISTORY)", HISTORY),
            ("the change log as it was at version 1 (time travel)", TIME_TRAVEL),
        ):
            self.say(f"cfp sql: {title}")
            sql = await asyncio.to_thread(
                self.cfp, "sql", "--output", OUTPUT.uri, "--spark-remote", self.remote, query
            )
            console.print(sql.stdout.rstrip() or sql.stderr.rstrip(), markup=False)
            codes_ok.append(sql.returncode)
        console.print(
            f"\ntables: {OUTPUT.changes} (change log) and {OUTPUT.state} (current state), "
            f"Delta tables in Azurite's blob storage (data in {WORKDIR / 'azurite'})",
            markup=False,
        )
        ok = (
            not any(codes_ok)
            and feed <= set(logged)
            and once
            and all(c == 0 for n, c in codes.items() if n != "h2")
        )
        return 0 if ok else 1

    def stop_everything(self) -> None:
        for proc in self.hosts.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if self.spark is not None and self.spark.poll() is None:
            self.spark.send_signal(signal.SIGTERM)  # cfp spark-connect stops its process group
            try:
                self.spark.wait(60)
            except subprocess.TimeoutExpired:
                self.spark.kill()
        self.azurite.stop()


def main() -> None:
    configure_logging(level="WARNING")
    shutil.rmtree(WORKDIR, ignore_errors=True)
    WORKDIR.mkdir(parents=True)
    demo = Demo()
    code = 1
    try:
        code = asyncio.run(demo.run())
    finally:
        demo.stop_everything()
    took = time.monotonic() - demo.started
    console.print(f"\nmake demo: {'OK' if code == 0 else 'FAILED'} in {took:.0f}s")
    raise SystemExit(code)


if __name__ == "__main__":
    main()
