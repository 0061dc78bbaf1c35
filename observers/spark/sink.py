"""One Spark write for many leases' batches, then both tables updated, then checkpoints.

A Spark job costs a fixed overhead, so the host's leases share writes: while Spark is busy with
one write, batches queue for the next (up to `max_rows` rows or `max_bytes`); an idle Spark gets
what is pending once `min_rows` rows are there or the oldest batch has waited `max_wait_s`. Each
write is one DataFrame per lease made from its Arrow rows, unioned. Spark cuts each lease's
rows into tasks of consecutive rows, so every file it writes holds a range of one lease, which
is linked into the change log as is (`ChangeLog.publish`: exactly once, whoever else writes).
Then the rows are folded into the current-state table, and only then is each batch's lease
checkpointed. Spark writes run one at a time, in a thread (Spark calls block); a write's state
update and checkpoints run beside the next Spark write, and each waits for the one before, so a
lease's checkpoints follow the order of its batches.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import structlog

from observers.spark.changelog import ChangeLog, lease_sources
from observers.spark.schema import records_table
from observers.spark.session import SparkOptions, open_session
from observers.spark.state import state_rows
from observers.spark.state_table import StateTable

log = structlog.get_logger("cfp.spark")

# tests only: pause once after a write is published (before its checkpoints), or once between
# the second Spark write and its publishing (a host stopped there becomes a zombie that knows an
# old end of the change log and holds a late write)
TEST_PAUSE_VAR = "CFP_TEST_SPARK_PAUSE_AFTER_PUBLISH_S"
TEST_PAUSE_BEFORE_VAR = "CFP_TEST_SPARK_PAUSE_BEFORE_PUBLISH_S"
WARM_UP_WRITES = 3

Phases = dict[str, float]


@dataclass(slots=True)
class Pending:
    lease: str
    table: pa.Table
    on_commit: Callable[[], Awaitable[None]]
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@dataclass(slots=True)
class SinkStats:
    writes: int = 0
    rows: int = 0
    published: int = 0
    skipped: int = 0
    state_buckets: int = 0
    state_conflicts: int = 0
    seconds: float = 0.0


class SparkSink:
    """Shared by every lease of a host: `async with SparkSink(options) as sink: ...`."""

    def __init__(self, options: SparkOptions, *, host: str = "host") -> None:
        self.options = options
        self.host = host
        self.changes = ChangeLog(options.changes)
        self.state = StateTable(
            options.state, options.internal / "state", buckets=options.state_buckets
        )
        self.stats = SinkStats()
        self._session: Any = None
        self._pending: list[Pending] = []
        self._rows = 0
        self._bytes = 0
        self._first_at = 0.0
        self._wake = asyncio.Event()
        self._room = asyncio.Condition()
        self._closing = False
        self._tails: dict[str, str | None] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._settling: asyncio.Task[None] | None = None
        self._written = 0  # Spark writes published (stats count the settled ones)

    async def __aenter__(self) -> SparkSink:
        self.options.changes.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self.state.open)
        self._session = await asyncio.to_thread(open_session, self.options)
        await asyncio.to_thread(self._warm_up)
        self._flusher = asyncio.create_task(self._flush_loop(), name="spark-sink")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing = True
        self._wake.set()
        if self._flusher is not None:
            await self._flusher
        if self._settling is not None:
            await self._settling
        if self._session is not None:
            await asyncio.to_thread(self._session.stop)

    def _warm_up(self) -> None:
        """Writes of made-up rows before the first lease: a fresh JVM runs its first writes
        several times slower than later ones (classes loaded, code compiled). Measured on 2
        cores: the first real 50,000-row write took 2.6 s after two writes of 4,000 rows and
        1.6 s after three of 20,000, against 0.95 s warm."""
        if self.options.warm_up_rows <= 0:
            return
        rows = _made_up_changes(self.options.warm_up_rows)
        half = rows.num_rows // 2
        leases = {"a": rows.slice(0, half), "b": rows.slice(half)}
        for _ in range(WARM_UP_WRITES):
            folder = self.options.staging / f"{self.host}-warm-up-{uuid.uuid4().hex}"
            try:
                self._write(leases, folder)
            finally:
                shutil.rmtree(folder, ignore_errors=True)

    def forget_tail(self, lease: str) -> None:
        """A lease (re)opened here: read its tail from the log at its next publish."""
        self._tails.pop(lease, None)

    async def submit(
        self, lease: str, table: pa.Table, on_commit: Callable[[], Awaitable[None]]
    ) -> asyncio.Future[None]:
        """Queue one batch; the future resolves once it is in both tables and `on_commit` ran.
        Waits while twice a write's worth is pending (back-pressure on the readers)."""
        async with self._room:
            await self._room.wait_for(self._has_room)
        item = Pending(lease, table, on_commit)
        if not self._pending:
            self._first_at = time.monotonic()
        self._pending.append(item)
        self._rows += table.num_rows
        self._bytes += table.nbytes
        self._wake.set()
        return item.done

    def _has_room(self) -> bool:
        o = self.options
        return self._rows < 2 * o.max_rows and self._bytes < 2 * o.max_bytes

    def _is_full(self) -> bool:
        """Worth a write now: a write's worth is pending, or enough to keep an idle Spark busy
        (the flush loop only asks between writes; rows that came during a write are many)."""
        o = self.options
        return self._rows >= min(o.min_rows, o.max_rows) or self._bytes >= o.max_bytes

    def _take_write(self) -> tuple[list[Pending], int, int]:
        """The oldest pending batches, up to a write's worth (at least one)."""
        o, rows, size, n = self.options, 0, 0, 0
        for item in self._pending:
            if n and (
                rows + item.table.num_rows > o.max_rows or size + item.table.nbytes > o.max_bytes
            ):
                break
            rows, size, n = rows + item.table.num_rows, size + item.table.nbytes, n + 1
        items, self._pending = self._pending[:n], self._pending[n:]
        self._rows -= rows
        self._bytes -= size
        if self._pending:
            self._first_at = time.monotonic()
            self._wake.set()  # the rest is due as soon as this write is done
        return items, rows, size

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._pending and not self._closing:
                due = self._first_at + self.options.max_wait_s - time.monotonic()
                if not self._is_full() and due > 0:
                    try:
                        async with asyncio.timeout(due):
                            while not self._is_full() and not self._closing:
                                await self._wake.wait()
                                self._wake.clear()
                    except TimeoutError:
                        pass
            if self._pending:
                await self._flush()
            elif self._closing:
                return

    async def _flush(self) -> None:
        items, rows, size = self._take_write()
        async with self._room:
            self._room.notify_all()
        started = time.monotonic()
        try:
            tables, phases = await asyncio.to_thread(self._write_and_publish, items)
        except Exception as e:
            log.error("spark.write_failed", rows=rows, bytes=size, error=repr(e))
            for item in items:
                item.done.set_exception(e)
            return
        if self._settling is not None:
            await self._settling  # one write settles while the next is written, no more
        self._settling = asyncio.create_task(
            self._settle(items, tables, started, phases), name="spark-settle"
        )

    async def _settle(
        self, items: list[Pending], tables: dict[str, pa.Table], started: float, phases: Phases
    ) -> None:
        """A published write's rows into the state table, then its leases' checkpoints. Runs
        beside the next Spark write: both tables are updated before any checkpoint moves."""
        rows = sum(t.num_rows for t in tables.values())
        clock = time.monotonic()
        try:
            applied = await asyncio.to_thread(
                self.state.apply, state_rows(pa.concat_tables(tables.values()))
            )
        except Exception as e:
            log.error("spark.state_failed", rows=rows, error=repr(e))
            for item in items:
                item.done.set_exception(e)
            return
        self.stats.state_buckets += applied.buckets
        self.stats.state_conflicts += applied.conflicts
        if applied.conflicts:
            log.info("spark.state_conflicts", conflicts=applied.conflicts)
        self.stats.writes += 1
        self.stats.rows += rows
        self.stats.seconds += time.monotonic() - started
        log.info(
            "spark.published",
            rows=rows,
            leases=len(tables),
            seconds=round(time.monotonic() - started, 3),
            **phases,
            state_s=round(time.monotonic() - clock, 3),
        )
        if pause := os.environ.pop(TEST_PAUSE_VAR, None):
            await asyncio.sleep(float(pause))
        await asyncio.gather(*(_commit(batches) for batches in _per_lease(items).values()))

    def _write_and_publish(self, items: list[Pending]) -> tuple[dict[str, pa.Table], Phases]:
        """Each lease's rows, and the seconds each step took (for the log)."""
        clock = time.monotonic()
        tables = {
            lease: pa.concat_tables(i.table for i in batches).combine_chunks()
            for lease, batches in _per_lease(items).items()
        }
        staging = self.options.staging / f"{self.host}-{uuid.uuid4().hex}"
        try:
            self._write(tables, staging)
            written = time.monotonic()
            if self._written and (pause := os.environ.pop(TEST_PAUSE_BEFORE_VAR, None)):
                log.info("spark.pausing_before_publish", seconds=float(pause))
                time.sleep(float(pause))
            for lease, sources in sorted(lease_sources(sorted(staging.glob("part-*"))).items()):
                for source in sources:
                    self._publish(lease, source)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self._written += 1
        return tables, {
            "spark_s": round(written - clock, 3),
            "publish_s": round(time.monotonic() - written, 3),
        }

    def _write(self, tables: dict[str, pa.Table], folder: Path) -> None:
        """One Spark write of every lease's rows: a DataFrame per lease, unioned, so that no
        task (and no file) mixes two leases and each holds consecutive rows of one."""
        frames = [self._session.createDataFrame(t) for t in tables.values()]
        functools.reduce(lambda a, b: a.union(b), frames).write.parquet(str(folder))

    def _publish(self, lease: str, source: Any) -> None:
        known = lease in self._tails
        done = self.changes.publish(lease, source, tail=self._tails.get(lease), known=known)
        self._tails[lease] = done.tail
        self.stats.published += done.rows
        self.stats.skipped += done.skipped
        if done.skipped:
            log.info("spark.replay_skipped", lease=lease, rows=done.skipped)


def _per_lease(items: list[Pending]) -> dict[str, list[Pending]]:
    out: dict[str, list[Pending]] = {}
    for item in items:
        out.setdefault(item.lease, []).append(item)
    return out


async def _commit(batches: list[Pending]) -> None:
    """Checkpoint one lease's batches of a write: the newest mark covers the older ones."""
    try:
        await batches[-1].on_commit()
    except Exception as e:
        for item in batches:
            item.done.set_exception(e)
    else:
        for item in batches:
            item.done.set_result(None)


def made_up_records(n: int, *, kinds: Sequence[str] = ("BlobCreated",)) -> list[dict[str, Any]]:
    """`n` records shaped like the service's and about as wide, of the event types `kinds` in
    turn (for warming up the writer, and for benchmarks)."""
    return [
        {
            "schemaVersion": 5,
            "topic": "/subscriptions/warm-up/resourceGroups/warm-up/providers/Microsoft.Storage",
            "subject": f"/blobServices/default/containers/warm-up/blobs/dir/{i % 97}/b{i}.bin",
            "eventType": kinds[i % len(kinds)],
            "eventTime": f"2026-01-01T00:00:{i % 60:02d}.{i % 10_000_000:07d}Z",
            "id": str(uuid.UUID(int=i)),
            "data": {
                "api": "PutBlob",
                "clientRequestId": str(uuid.UUID(int=i + 1)),
                "requestId": str(uuid.UUID(int=i + 2)),
                "etag": f"0x{i:015X}",
                "contentType": "application/octet-stream",
                "contentLength": i,
                "blobType": "BlockBlob",
                "url": f"http://127.0.0.1:10000/warm-up/dir/{i % 97}/b{i}.bin",
                "sequencer": f"{i:048x}",
                "blobTagsUpdated": {"current": {"n": str(i % 7)}} if i % 5 == 0 else None,
                "storageDiagnostics": {"bid": str(uuid.UUID(int=i + 3)), "seq": f"({i},0,0,0)"},
            },
        }
        for i in range(n)
    ]


def _made_up_changes(n: int) -> pa.Table:
    """`n` change log rows shaped like real ones (for warming up the writer)."""
    positions = [f"{i:038d}" for i in range(n)]
    return records_table(
        made_up_records(n), positions, shard="00", segment="idx/segments/2026/01/01/0000/meta.json"
    )
