"""The change log's writes for many leases' batches, then their checkpoints.

A Spark job costs a fixed overhead, so batches queue for the next write (`write_queue` says how
much a write takes, and when it is due). A write is one fenced append per lease it holds, each
from one Arrow table (`ChangeLog.write`: exactly once against replays and zombies), run side
by side in threads since appends of different leases never conflict. Only then is each
lease's batch checkpointed. Writes run one after the other (a lease's appends must commit in
the order of their versions); a write's checkpoints run beside the next write, and each waits
for the one before, so a lease's checkpoints follow the order of its batches.

A lease whose append fails fails every batch of it still queued behind it too (they are never
written, so no checkpoint can pass the lost batch), until the lease is opened again and reads
from its last checkpoint; it syncs (a fence, a floor) before its next append. Other leases of
the same write are not held up.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import structlog

from observers.builtin.spark.changelog.change_log import ChangeLog, Hold, LeaseFenced, Written
from observers.builtin.spark.changelog.fence import LeaseFence, app_id
from observers.builtin.spark.changelog.lease_writes import (
    Writer,
    append_each,
    fence_ahead,
    run_blocking,
    sync_ahead,
)
from observers.builtin.spark.changelog.made_up_records import made_up_changes
from observers.builtin.spark.changelog.write_queue import Pending, WriteQueue
from observers.builtin.spark.faults import commit_pauses
from observers.builtin.spark.session.output import Output, parse_output
from observers.builtin.spark.session.session import SparkOptions, new_session, open_session
from observers.builtin.spark.tables import create_tables

log = structlog.get_logger("cfp.spark")

WARM_UP_WRITES = 3
# Spark calls in flight at once (commits, fences, syncs, the state job, batches made into rows),
# in threads of the sink's own: one that hangs (an executor lost mid-write) holds none of the
# event loop's default threads, which the host's decoders use
SPARK_THREADS = 8
HOLD_POLL_S = 0.2


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


@dataclass(slots=True)
class SinkStats:
    writes: int = 0
    rows: int = 0
    appended: int = 0
    skipped: int = 0
    commits: int = 0  # Spark commits tried (fences and retries included)
    syncs: int = 0  # fences committed and floors read
    fenced: int = 0  # appends refused or skipped because a newer writer of the lease stands
    seconds: float = 0.0

    def count(self, written: Sequence[Written], took: float) -> None:
        """One committed write of these leases' appends, logged."""
        rows, appended = sum(w.rows for w in written), sum(w.appended for w in written)
        commits, synced = sum(w.attempts for w in written), sum(w.synced for w in written)
        self.writes += 1
        self.rows += rows
        self.appended += appended
        self.skipped += rows - appended
        self.commits += commits
        self.syncs += synced
        self.seconds += took
        log.info(
            "spark.committed",
            rows=rows,
            appended=appended,
            leases=len(written),
            commits=commits,
            synced=synced,
            seconds=round(took, 3),
            spark_s=round(took, 3),
        )
        if rows > appended:
            log.info("spark.replay_skipped", rows=rows - appended)


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
        self._fences: dict[str, LeaseFence] = {}  # lease -> where its writes stand
        self._fencing: dict[str, asyncio.Task[None]] = {}  # lease -> its fence, committing
        self._flusher: asyncio.Task[None] | None = None
        self._settling: asyncio.Task[None] | None = None
        self._written = 0  # Spark writes committed
        self._pauses = commit_pauses()  # the tests' (faults.py): none unless asked
        self.calls = ThreadPoolExecutor(SPARK_THREADS, thread_name_prefix="cfp-spark")

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
        if self._fencing:
            await asyncio.wait(self._fencing.values())
        if self._settling is not None:
            await self._settling
        if self._own_session and self.session is not None:
            if self.options.remote and self.job_session is not None:
                await run_blocking(self.calls, self.job_session.stop)  # a session of its own there
            await run_blocking(self.calls, self.session.stop)
        self.calls.shutdown(wait=False)

    def _warm_up(self) -> None:
        warm_up(self.session, self.options.warm_up_rows, is_closed=lambda: self._queue.is_closed)

    def open_lease(self, lease: str, epoch: int, processor: str = "") -> None:
        """A lease (re)opened here at `epoch`: it reads again from its checkpoint, so an old write
        failure no longer stands in its way, and its next append syncs first (`fence.py`)."""
        self._failed.pop(lease, None)
        fence = self._fences.get(lease)
        if fence is None:
            fence = self._fences[lease] = LeaseFence(lease, app_id(processor, lease), epoch)
        else:
            fence.reopened(epoch)
        ahead = fence_ahead(
            self.changes, self.session, fence, self._fencing.get(lease), calls=self.calls
        )
        self._fencing[lease] = asyncio.create_task(ahead)

    async def floor(self, lease: str, first: str) -> str | None:
        """The lease's highest position in the change log from `first` on, read after its
        fence (the sync its first write would do, done now): None when there is none, or the
        read failed (its first write then syncs itself, and leaves out what it must)."""
        if (task := self._sync_ahead(lease, first)) is not None:
            await asyncio.wait([task])  # a worker that gives up leaves it to the first write
        fence = self._fences.get(lease)
        if fence is None or lease in self._failed or not fence.synced:
            return None
        return fence.floor

    async def submit(
        self, lease: str, table: pa.Table, on_commit: Callable[[], Awaitable[None]]
    ) -> asyncio.Future[None]:
        """Queue one batch; the future resolves once it is committed and `on_commit` ran.
        Waits while twice a write's worth is pending (back-pressure on the readers)."""
        if table.num_rows:
            self._sync_ahead(lease, pc.min(table["position"]).as_py())
        item = Pending(lease, table, on_commit)
        await self._queue.put(item)
        return item.done

    def _sync_ahead(self, lease: str, first: str) -> asyncio.Task[None] | None:
        """The lease's floor read (after its fence) from `first` on, started unless synced or
        asked since it last unsynced: its first write then finds it done. The task, if started."""
        fence = self._fences.get(lease)
        if fence is None or lease in self._failed or not fence.ask_sync():
            return None
        before = self._fencing.get(lease)
        ahead = sync_ahead(
            self.changes,
            self.session,
            fence,
            before,
            at_least=first,
            generation=fence.generation,
            calls=self.calls,
        )
        task = self._fencing[lease] = asyncio.create_task(ahead)
        return task

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
        items, _, _ = await self._queue.take_write()
        items = drop_failed(items, self._failed)
        if not items:
            return
        started = time.monotonic()
        per_lease = _per_lease(items)
        fencing = [self._fencing.pop(lease) for lease in per_lease if lease in self._fencing]
        if fencing:
            await asyncio.wait(fencing)
        outcomes = await run_blocking(self.calls, functools.partial(self._commit, per_lease))
        took = time.monotonic() - started
        done: list[Pending] = []
        written: list[Written] = []
        for lease, outcome in outcomes.items():
            if isinstance(outcome, Written):
                written.append(outcome)
                done.extend(per_lease[lease])
                if outcome.synced:  # the cost of taking a lease, in the change log
                    log.info(
                        "spark.synced", lease=lease, seconds=round(outcome.sync_s, 3), ahead=False
                    )
            else:
                self._fail(lease, per_lease[lease], outcome)
        if not written:
            return
        self.stats.count(written, took)
        if self._settling is not None:
            await self._settling  # one write settles while the next is written, no more
        self._settling = asyncio.create_task(self._settle(done), name="spark-settle")

    def _fail(self, lease: str, items: list[Pending], error: BaseException) -> None:
        """The lease's append failed: its batches and those queued behind them fail."""
        rows = sum(i.table.num_rows for i in items)
        if isinstance(error, LeaseFenced):
            self.stats.fenced += 1
            log.warning(
                "spark.fenced",
                lease=lease,
                epoch=error.epoch,
                version=error.version,
                rows=rows,
                error=str(error),
            )
        else:
            log.error("spark.write_failed", lease=lease, rows=rows, error=repr(error)[:2000])
        self._failed[lease] = error
        for item in items:
            _resolve(item.done, error)

    async def _settle(self, items: list[Pending]) -> None:
        """A committed write's checkpoints, one per lease (its newest batch's mark covers the
        older ones). Runs beside the next Spark write."""
        if pause := self._pauses.after_commit_s:
            self._pauses = dataclasses.replace(self._pauses, after_commit_s=0.0)
            await asyncio.sleep(pause)
        await asyncio.gather(*(_checkpoint(batches) for batches in _per_lease(items).values()))

    def _commit(self, per_lease: Mapping[str, list[Pending]]) -> dict[str, Written | BaseException]:
        """One write: each lease's rows appended, side by side (blocking); per lease, what
        was written or why not."""
        tables = {lease: _joined(batches) for lease, batches in per_lease.items()}
        hold: Hold | None = None
        if self._written and (flag := self._pauses.hold_file):
            self._pauses = dataclasses.replace(self._pauses, hold_file="")
            log.info("spark.holding_write", until=flag)
            hold = _held_until(flag)
        self._written += 1
        return append_each(self.changes, self.session, self._fences, tables, hold)


def warm_up(
    session: Any,
    rows: int,
    *,
    is_closed: Callable[[], bool],
    into: Output | None = None,
    writes: int = WARM_UP_WRITES,
) -> None:
    """Writes of made-up rows into a scratch table before the first real write: a fresh JVM runs
    its first writes several times slower than later ones (classes loaded, code compiled).
    Measured on 2 cores: the first real 50,000-row write took 2.6 s after two writes of 4,000
    rows and 1.6 s after three of 20,000, against 0.95 s warm and 7-8 s cold; the warm-up
    itself took 13-17 s, hence off by default. Only for an embedded session: a Spark Connect
    server is shared, and warm already. A host stopped meanwhile waits for one write at most.
    `into`: tables to keep (the class archive's training run), else a scratch folder."""
    half = rows // 2 or 1
    folder = None if into is not None else Path(tempfile.mkdtemp(prefix="cfp-warm-up-"))
    try:
        scratch = into or parse_output(str(folder))
        create_tables(session, scratch)
        writer = ChangeLog(scratch.changes)
        fences = {lease: LeaseFence(lease, f"warm-up/{lease}", 1) for lease in "ab"}
        for n in range(writes):  # new positions each time: every write appends
            if is_closed():
                return
            for lease, fence in fences.items():
                writer.write(session, fence, made_up_changes(half, shard=lease, start=n * half))
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _held_until(flag: str) -> Hold:
    """A DataFrame's rows held inside Spark until `flag` exists (tests: a write in flight). The
    first of its tasks to run makes `flag`.held (the write's Delta transaction is open by then)
    and waits; the others pass, so that the held write takes one task slot, not the server."""

    def wait_then_pass(batches: Any) -> Any:
        try:
            os.close(os.open(f"{flag}.held", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            yield from batches
            return
        while not os.path.exists(flag):
            time.sleep(HOLD_POLL_S)
        yield from batches

    def hold(frame: Any) -> Any:
        return frame.mapInArrow(wait_then_pass, frame.schema)

    return hold


def _joined(batches: list[Pending]) -> pa.Table:
    """One lease's batches of a write as one Arrow table, one chunk: Spark's one hand-over."""
    return pa.concat_tables(i.table for i in batches).combine_chunks()


def drop_failed(items: list[Pending], failed: Mapping[str, BaseException]) -> list[Pending]:
    """Fail the batches of leases whose earlier write failed (writing them would let their
    checkpoint pass the lost batch); the others."""
    kept = []
    for item in items:
        error = failed.get(item.lease)
        if error is None:
            kept.append(item)
        else:
            _resolve(item.done, error)
    return kept


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
