"""One Spark write for many leases' batches, then each lease's rows published and checkpointed.

A Spark job costs a fixed overhead, so the host's leases share writes: batches wait (at most
`max_wait_s`, or until `max_rows` are pending) and go to Spark together as one Arrow table, written
as Parquet into a staging folder partitioned by lease. Then each lease's files are published into
the change log (`ChangeLog.publish`: exactly once, whoever else writes) and only then is each
batch's lease checkpointed. Writes run one at a time, in a thread (Spark calls block), so a
lease's checkpoints follow the order of its batches.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import structlog

from observers.spark.changelog import ChangeLog
from observers.spark.schema import changes_table
from observers.spark.session import SparkOptions, open_session

log = structlog.get_logger("cfp.spark")

LEASE_COLUMN = "lease"
TEST_PAUSE_VAR = "CFP_TEST_SPARK_PAUSE_AFTER_PUBLISH_S"  # tests only


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
    seconds: float = 0.0


class SparkSink:
    """Shared by every lease of a host: `async with SparkSink(options) as sink: ...`."""

    def __init__(self, options: SparkOptions, *, host: str = "host") -> None:
        self.options = options
        self.host = host
        self.changes = ChangeLog(options.changes)
        self.stats = SinkStats()
        self._session: Any = None
        self._pending: list[Pending] = []
        self._rows = 0
        self._first_at = 0.0
        self._wake = asyncio.Event()
        self._room = asyncio.Condition()
        self._closing = False
        self._tails: dict[str, str | None] = {}
        self._flusher: asyncio.Task[None] | None = None

    async def __aenter__(self) -> SparkSink:
        self.options.changes.mkdir(parents=True, exist_ok=True)
        self._session = await asyncio.to_thread(open_session, self.options)
        await asyncio.to_thread(self._warm_up)
        self._flusher = asyncio.create_task(self._flush_loop(), name="spark-sink")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing = True
        self._wake.set()
        if self._flusher is not None:
            await self._flusher
        if self._session is not None:
            await asyncio.to_thread(self._session.stop)

    def _warm_up(self) -> None:
        """One tiny write before the first lease: a fresh JVM's first job takes seconds."""
        folder = self.options.staging / f"{self.host}-warm-up-{uuid.uuid4().hex}"
        try:
            empty = changes_table([]).append_column(LEASE_COLUMN, pa.array([], pa.string()))
            self._session.createDataFrame(empty).write.parquet(str(folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def forget_tail(self, lease: str) -> None:
        """A lease (re)opened here: read its tail from the log at its next publish."""
        self._tails.pop(lease, None)

    async def submit(
        self, lease: str, table: pa.Table, on_commit: Callable[[], Awaitable[None]]
    ) -> asyncio.Future[None]:
        """Queue one batch; the future resolves once it is published and `on_commit` ran.
        Waits while twice `max_rows` are pending (back-pressure on the readers)."""
        async with self._room:
            await self._room.wait_for(lambda: self._rows < 2 * self.options.max_rows)
        item = Pending(lease, table, on_commit)
        if not self._pending:
            self._first_at = time.monotonic()
        self._pending.append(item)
        self._rows += table.num_rows
        self._wake.set()
        return item.done

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._pending and not self._closing:
                due = self._first_at + self.options.max_wait_s - time.monotonic()
                if self._rows < self.options.max_rows and due > 0:
                    try:
                        async with asyncio.timeout(due):
                            while self._rows < self.options.max_rows and not self._closing:
                                await self._wake.wait()
                                self._wake.clear()
                    except TimeoutError:
                        pass
            if self._pending:
                await self._flush()
            elif self._closing:
                return

    async def _flush(self) -> None:
        items, self._pending, rows = self._pending, [], self._rows
        self._rows = 0
        async with self._room:
            self._room.notify_all()
        started = time.monotonic()
        try:
            await asyncio.to_thread(self._write_and_publish, items)
        except Exception as e:
            log.error("spark.write_failed", rows=rows, error=repr(e))
            for item in items:
                item.done.set_exception(e)
            return
        self.stats.writes += 1
        self.stats.rows += rows
        self.stats.seconds += time.monotonic() - started
        log.info(
            "spark.published",
            rows=rows,
            leases=len({i.lease for i in items}),
            seconds=round(time.monotonic() - started, 3),
        )
        if pause := os.environ.pop(TEST_PAUSE_VAR, None):  # tests: a crash before checkpoints
            await asyncio.sleep(float(pause))
        for item in items:
            try:
                await item.on_commit()
            except Exception as e:
                item.done.set_exception(e)
            else:
                item.done.set_result(None)

    def _write_and_publish(self, items: list[Pending]) -> None:
        # one contiguous Arrow buffer in (lease, position) order: Spark cuts it into record
        # batches of consecutive rows, so each file it writes holds a range of one lease
        table = pa.concat_tables(
            item.table.append_column(LEASE_COLUMN, pa.array([item.lease] * item.table.num_rows))
            for item in items
        ).sort_by([(LEASE_COLUMN, "ascending"), ("position", "ascending")])
        staging = self.options.staging / f"{self.host}-{uuid.uuid4().hex}"
        try:
            frame = self._session.createDataFrame(table.combine_chunks())
            frame.write.partitionBy(LEASE_COLUMN).parquet(str(staging))
            for lease in sorted({item.lease for item in items}):
                self._publish(lease, staging / f"{LEASE_COLUMN}={lease}")
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _publish(self, lease: str, folder: Path) -> None:
        sources = _contiguous_sources(sorted(folder.glob("*.parquet")))
        for source in sources:
            known = lease in self._tails
            done = self.changes.publish(lease, source, tail=self._tails.get(lease), known=known)
            self._tails[lease] = done.tail
            self.stats.published += done.rows
            self.stats.skipped += done.skipped
            if done.skipped:
                log.info("spark.replay_skipped", lease=lease, rows=done.skipped)


def _contiguous_sources(files: list[Path]) -> list[pa.Table | Path]:
    """The files of one lease in chain order when their position ranges do not interleave;
    otherwise all their rows as one table (a chain link must be a contiguous range)."""
    if len(files) < 2:
        return list(files)
    ranges = []
    for path in files:
        positions = pq.read_table(path, columns=["position"]).column("position")
        ranges.append((str(pc.min(positions).as_py()), str(pc.max(positions).as_py()), path))
    ranges.sort()
    if all(a[1] < b[0] for a, b in itertools.pairwise(ranges)):
        return [path for _, _, path in ranges]
    return [pa.concat_tables(pq.read_table(path) for path in files)]
