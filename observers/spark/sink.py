"""One change-log commit for many leases' batches, then their checkpoints.

A Spark job costs a fixed overhead, so the host's leases share writes: batches queue for the
next one (`write_queue` says how much a write takes, and when it is due). Each write is one
DataFrame per lease made from its Arrow rows, unioned, and one Delta MERGE that inserts the
events the change log lacks (`ChangeLog.insert_unseen`: exactly once, whoever else writes).
Only then is each batch's lease checkpointed. Spark writes run one at a time, in a
thread (Spark calls block); a write's checkpoints run beside the next Spark write, and each
waits for the one before, so a lease's checkpoints follow the order of its batches.

A write that fails fails every batch of its leases still queued behind it too (they are never
written, so no checkpoint can pass the lost batch), until the lease is opened again and reads
from its last checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import structlog

from observers.spark.changelog import ChangeLog, Inserted
from observers.spark.output import parse_output
from observers.spark.records import made_up_changes
from observers.spark.session import SparkOptions, new_session, open_session
from observers.spark.tables import create_tables
from observers.spark.write_queue import Pending, WriteQueue

log = structlog.get_logger("cfp.spark")

# tests only: pause once after a write is committed (before its checkpoints), or once between
# the second Spark write's DataFrame and its commit (a host stopped there becomes a zombie that
# holds a late write)
WARM_UP_WRITES = 3


async def in_daemon_thread(fn: Callable[[], None]) -> None:
    """Run `fn` in a daemon thread and wait for it. Unlike `asyncio.to_thread`, a caller that
    gives up (a host stopped while its Spark session opens) does not keep the process alive:
    the interpreter joins executor threads on exit, never daemon ones (an embedded JVM then
    exits with its Python parent, on the end of its standard input)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def run() -> None:
        error: BaseException | None = None
        try:
            fn()
        except BaseException as e:  # handed to the waiting coroutine
            error = e
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(_resolve, done, error)

    threading.Thread(target=run, name="spark-open", daemon=True).start()
    await done


class Writer(Protocol):
    """Commits one write of several leases' rows (blocking); the Spark one is `ChangeLog`."""

    def insert_unseen(self, session: Any, tables: Mapping[str, pa.Table]) -> Inserted: ...


@dataclass(slots=True)
class SinkStats:
    writes: int = 0
    rows: int = 0
    inserted: int = 0
    skipped: int = 0
    retried: int = 0  # commits run again after another writer's commit conflicted
    seconds: float = 0.0


class SparkSink:
    """Shared by every lease of a host: `async with SparkSink(options) as sink: ...`.

    `writer` and `session` stand in for the change log and the Spark session in tests of the
    batching alone; by default the sink opens the session and makes the tables itself, and an
    embedded session is warmed up when asked (`--spark-warm-up-rows`; `warm_up` in tests), by the
    writer's task before its first write."""

    def __init__(
        self,
        options: SparkOptions,
        *,
        host: str = "host",
        writer: Writer | None = None,
        session: Any = None,
        warm_up: Callable[[], None] | None = None,
    ) -> None:
        self.options = options
        self.host = host
        self.changes: Writer = writer or ChangeLog(options.changes)
        self.stats = SinkStats()
        self.session: Any = session
        self.job_session: Any = None  # the state job's own session on the same Spark
        self._own_session = session is None
        if warm_up is None and self._own_session and options.remote is None:
            warm_up = self._warm_up if options.warm_up_rows > 0 else None
        self._warming = warm_up
        self._queue = WriteQueue(options)
        self._failed: dict[str, BaseException] = {}  # lease -> why its last write failed
        self._flusher: asyncio.Task[None] | None = None
        self._settling: asyncio.Task[None] | None = None
        self._written = 0  # Spark writes committed
        self._pauses = options.pauses

    async def __aenter__(self) -> SparkSink:
        if self._own_session:
            took: dict[str, float] = {}
            await in_daemon_thread(lambda: self._open(took))
            log.info("spark.opened", **{k: round(v, 1) for k, v in took.items()})
        self._flusher = asyncio.create_task(self._flush_loop(), name="spark-sink")
        self._flusher.add_done_callback(_log_crash)
        return self

    def _open(self, took: dict[str, float]) -> None:
        """Session, tables and the job's session (blocking; tens of seconds when several JVMs
        start on a small machine), timing each step into `took`. The warm-up comes after, in
        the writer's own task."""
        started = time.monotonic()
        self.session = open_session(self.options)
        took["session_s"] = time.monotonic() - started
        create_tables(
            self.session,
            self.options.output,
            is_local_spark=self.options.remote is None,
            history=self.options.keep_history,
        )
        took["tables_s"] = time.monotonic() - started - took["session_s"]
        self.job_session = new_session(self.session, self.options)
        took["total_s"] = time.monotonic() - started

    async def __aexit__(self, *exc: object) -> None:
        self._queue.close()
        if self._flusher is not None:
            await self._flusher
        if self._settling is not None:
            await self._settling
        if self._own_session and self.session is not None:
            if self.options.remote and self.job_session is not None:
                await asyncio.to_thread(self.job_session.stop)  # a session of its own there
            await asyncio.to_thread(self.session.stop)

    def _warm_up(self) -> None:
        """MERGEs of made-up rows into a scratch table before the first real write: a fresh JVM runs
        its first writes several times slower than later ones (classes loaded, code compiled).
        Measured on 2 cores: the first real 50,000-row write took 2.6 s after two writes of 4,000
        rows and 1.6 s after three of 20,000, against 0.95 s warm and 7-8 s cold; the warm-up
        itself took 13-17 s, hence off by default. Only for an embedded session: a Spark Connect
        server is shared, and warm already."""
        half = self.options.warm_up_rows // 2 or 1
        folder = Path(tempfile.mkdtemp(prefix="cfp-warm-up-"))
        try:
            scratch = parse_output(str(folder))
            create_tables(self.session, scratch)
            writer = ChangeLog(scratch.changes)
            for n in range(WARM_UP_WRITES):  # new positions each time: every write inserts
                # a host stopped while warming up waits for one write at most
                if self._queue.is_closed:
                    return
                leases = {
                    lease: made_up_changes(half, shard=lease, start=n * half) for lease in "ab"
                }
                writer.insert_unseen(self.session, leases)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def forget(self, lease: str) -> None:
        """A lease (re)opened here: it reads again from its checkpoint, so an old write failure
        no longer stands in its way."""
        self._failed.pop(lease, None)

    async def submit(
        self, lease: str, table: pa.Table, on_commit: Callable[[], Awaitable[None]]
    ) -> asyncio.Future[None]:
        """Queue one batch; the future resolves once it is committed and `on_commit` ran.
        Waits while twice a write's worth is pending (back-pressure on the readers)."""
        item = Pending(lease, table, on_commit)
        await self._queue.put(item)
        return item.done

    async def _flush_loop(self) -> None:
        # warmed up while the host already takes its leases and reads ahead: their first
        # batches wait for it here, instead of the host holding nothing until it is done
        if self._warming is not None:
            try:
                await in_daemon_thread(self._warming)
            except Exception as e:  # costs only slower first writes; real ones report real errors
                log.warning("spark.warm_up_failed", error=repr(e))
        while True:
            await self._queue.wait_for_write()
            if self._queue.has_pending:
                await self._flush()
            elif self._queue.is_closed:
                return

    async def _flush(self) -> None:
        items, rows, size = await self._queue.take_write()
        items = self._drop_failed(items)
        if not items:
            return
        started = time.monotonic()
        try:
            done, phases = await asyncio.to_thread(self._commit, items)
        except Exception as e:
            log.error("spark.write_failed", rows=rows, bytes=size, error=repr(e)[:2000])
            for item in items:
                self._failed[item.lease] = e
                _resolve(item.done, e)
            return
        self.stats.writes += 1
        self.stats.rows += done.rows
        self.stats.inserted += done.inserted
        self.stats.skipped += done.skipped
        self.stats.retried += done.attempts - 1
        self.stats.seconds += time.monotonic() - started
        log.info(
            "spark.committed",
            rows=done.rows,
            inserted=done.inserted,
            leases=len({i.lease for i in items}),
            attempts=done.attempts,
            seconds=round(time.monotonic() - started, 3),
            **phases,
        )
        if done.skipped:
            log.info("spark.replay_skipped", rows=done.skipped)
        if self._settling is not None:
            await self._settling  # one write settles while the next is written, no more
        self._settling = asyncio.create_task(self._settle(items), name="spark-settle")

    def _drop_failed(self, items: list[Pending]) -> list[Pending]:
        """Fail the batches of leases whose earlier write failed: writing them would let their
        checkpoint pass the lost batch."""
        kept = []
        for item in items:
            error = self._failed.get(item.lease)
            if error is None:
                kept.append(item)
            else:
                _resolve(item.done, error)
        return kept

    async def _settle(self, items: list[Pending]) -> None:
        """A committed write's checkpoints, one per lease (its newest batch's mark covers the
        older ones). Runs beside the next Spark write."""
        if pause := self._pauses.after_commit_s:
            self._pauses = dataclasses.replace(self._pauses, after_commit_s=0.0)
            await asyncio.sleep(pause)
        await asyncio.gather(*(_checkpoint(batches) for batches in _per_lease(items).values()))

    def _commit(self, items: list[Pending]) -> tuple[Inserted, dict[str, float]]:
        """One write of the items' rows (blocking); what it inserted, and the seconds it took."""
        tables = {
            lease: pa.concat_tables(i.table for i in batches).combine_chunks()
            for lease, batches in _per_lease(items).items()
        }
        rows = sum(t.num_rows for t in tables.values())
        if rows == 0:  # every event was left out (the output's own container): nothing to write
            return Inserted(0, 0, 0), {}
        if self._written and (pause := self._pauses.before_commit_s):
            self._pauses = dataclasses.replace(self._pauses, before_commit_s=0.0)
            log.info("spark.pausing_before_commit", seconds=pause)
            time.sleep(pause)
        clock = time.monotonic()
        done = self.changes.insert_unseen(self.session, tables)
        self._written += 1
        return done, {"spark_s": round(time.monotonic() - clock, 3)}


def _per_lease(items: Sequence[Pending]) -> dict[str, list[Pending]]:
    out: dict[str, list[Pending]] = {}
    for item in items:
        out.setdefault(item.lease, []).append(item)
    return out


async def _checkpoint(batches: list[Pending]) -> None:
    """Checkpoint one lease's batches of a write: the newest mark covers the older ones."""
    error: BaseException | None = None
    try:
        await batches[-1].on_commit()
    except Exception as e:
        error = e
    for item in batches:
        _resolve(item.done, error)


def _log_crash(task: asyncio.Task[None]) -> None:
    """The flush loop ends only when the sink closes; anything else is a bug that would leave
    every lease of the host waiting in silence, so it is logged at once."""
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("spark.sink_crashed", error=repr(error), exc_info=error)


def _resolve(done: asyncio.Future[None], error: BaseException | None) -> None:
    """Settle a future unless its waiter gave up on it (a close that timed out, a cancelled
    worker or open): setting a cancelled future raises, and would stop the sink's loop."""
    if done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)
