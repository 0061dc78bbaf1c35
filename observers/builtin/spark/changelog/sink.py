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

When the Spark Connect server is lost (`session/link.py`) nothing fails: the write that was in
flight goes back in front of the queue, no write is taken until the link is back, and each lease
may queue at most a write's worth meanwhile (then `SparkUnavailable` refuses its batches, which
its worker offers again). Once back, every open lease syncs again, as after any write whose
outcome is unknown, and the queue is written: what the lost write had committed is at or below
the floors, the rest is appended.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import structlog

from observers.builtin.spark.changelog.change_log import ChangeLog, Hold, LeaseFenced, Written
from observers.builtin.spark.changelog.delta_appends import Writer, append_each
from observers.builtin.spark.changelog.sink_leases import SinkLeases, drop_failed
from observers.builtin.spark.changelog.sink_stats import SinkStats
from observers.builtin.spark.changelog.warm_up import warm_up
from observers.builtin.spark.changelog.write_queue import Pending, WriteQueue
from observers.builtin.spark.faults import commit_pauses, held_until
from observers.builtin.spark.session.link import (
    Sessions,
    SparkLink,
    SparkUnavailable,
    call_patiently,
)
from observers.builtin.spark.session.session import SparkOptions
from observers.builtin.spark.tables import create_tables
from observers.builtin.spark.threads import in_daemon_thread
from observers.protocol import SinkHealth

log = structlog.get_logger("cfp.spark")

# Spark calls in flight at once (commits, fences, syncs, the state job, batches made into rows),
# in threads of the sink's own: one that hangs (an executor lost mid-write) holds none of the
# event loop's default threads, which the host's decoders use
SPARK_THREADS = 8
# while Spark is away, a lease holding a write's worth waits this long for it, then its batch is
# refused (its worker offers it again: a stop or a lost lease ends that)
AWAY_WAIT_S = 5.0


class SparkSink:
    """Shared by every lease of a host: `async with SparkSink(options) as sink: ...`.

    `writer` and `session` stand in for the change log and the Spark session in tests of the
    batching alone; by default the sink opens the sessions (`SparkLink`) and makes the tables
    itself, and an embedded session is warmed up when asked (`--spark-warm-up-rows`; `warm_up`
    in tests), by the writer's task before its first write."""

    def __init__(
        self,
        options: SparkOptions,
        *,
        host: str = "host",
        writer: Writer | None = None,
        session: Any = None,
        warm_up: Callable[[], None] | None = None,
        link: SparkLink | None = None,
    ) -> None:
        self.options = options
        self.host = host
        self.changes: Writer = writer or ChangeLog(options.changes)
        self.stats = SinkStats()
        self.calls = ThreadPoolExecutor(SPARK_THREADS, thread_name_prefix="cfp-spark")
        self._own_session = session is None and link is None
        given = Sessions(None, session, None, 1) if session is not None else None
        self.link = link or SparkLink(options, host=host, calls=self.calls, sessions=given)
        self.leases = SinkLeases(self.changes, self.link)
        self.link.listeners.extend([self.leases.resync, self._reopened])
        # Spark went away: submitters waiting for room look again (each lease may queue a
        # write's worth then, no more)
        self.link.losers.append(lambda: _spawn(self._queue.wake_submitters()))
        if warm_up is None and self._own_session and not options.is_remote:
            warm_up = self._warm_up if options.warm_up_rows > 0 else None
        self._warming = warm_up
        self._queue = WriteQueue(options)
        self._closing = asyncio.Event()
        # set once the writes queued when Spark came back are written (the state job waits)
        self.caught_breath = asyncio.Event()
        self.caught_breath.set()
        self._flusher: asyncio.Task[None] | None = None
        self._settling: asyncio.Task[None] | None = None
        self._written = 0  # Spark writes committed
        self._pauses = commit_pauses()  # the tests' (faults.py): none unless asked

    async def __aenter__(self) -> SparkSink:
        if self._own_session:
            await open_tables(self.link, self.options)
        self._flusher = asyncio.create_task(self._flush_loop(), name="spark-sink")
        self._flusher.add_done_callback(_log_crash)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()
        self._queue.close()
        if self._flusher is not None:
            await self._flusher
        await self.leases.settled()
        if self._settling is not None:
            await self._settling
        if self._own_session:
            await self.link.close()
        self.calls.shutdown(wait=False)

    def health(self) -> SinkHealth:
        """Whether Spark answers, through which server, and what waits for it."""
        pending = {"pendingRows": self._queue.rows, "pendingBytes": self._queue.nbytes}
        return SinkHealth(self.link.outage, {**self.link.details(), **pending})

    def _warm_up(self) -> None:
        session = self.link.sessions.writer
        warm_up(session, self.options.warm_up_rows, is_closed=lambda: self._queue.is_closed)

    def open_lease(self, lease: str, epoch: int, processor: str = "") -> None:
        """A lease (re)opened here at `epoch` (`SinkLeases.opened`)."""
        self.leases.opened(lease, epoch, processor)

    async def close_lease(self, lease: str) -> int:
        """A lease let go of here. While Spark is away its queued batches are given up (its
        next owner reads them again from the checkpoint): how many rows."""
        self.leases.closed(lease)
        if self.link.is_up:
            return 0
        dropped = await self._queue.take_lease(lease)
        for item in dropped:
            self._give_up(item)
        return sum(i.table.num_rows for i in dropped)

    async def submit(
        self, lease: str, table: pa.Table, on_commit: Callable[[], Awaitable[None]]
    ) -> asyncio.Future[None]:
        """Queue one batch; the future resolves once it is committed and `on_commit` ran.
        Waits while twice a write's worth is pending (back-pressure on the readers). While
        Spark is away, a lease queues at most a write's worth (`has_room_while_away`). Errors:
        `SparkUnavailable` when it has no room then and Spark does not come back within
        `AWAY_WAIT_S`."""
        if table.num_rows:
            self.leases.sync_ahead(lease, self._queue.lowest(lease, table))
        item = Pending(lease, table, on_commit, self.leases.opening(lease))
        while True:
            if self.link.is_up:
                if await self._queue.put(item, unless=self.link.down):
                    return item.done
            elif self._queue.has_room_while_away(item):
                self._queue.put_now(item)
                return item.done
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(AWAY_WAIT_S):
                        await self.link.up.wait()
                if not self.link.is_up:
                    raise SparkUnavailable(self.link.outage)

    def _reopened(self, sessions: Sessions) -> None:
        """Spark is back: the state job waits for the queue's first write (not beside it)."""
        if self._queue.has_pending:
            self.caught_breath.clear()

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
            if self._queue.has_pending and not self.link.is_up:
                await _first_of(self.link.up, self._closing)
            if self._queue.has_pending and self.link.is_up:
                await self._flush()
            elif self._queue.is_closed:
                await self._give_up_pending()
                return

    async def _flush(self) -> None:
        taken, _, _ = await self._queue.take_write()
        items = drop_failed(self._current(taken), self.leases.failed, self._give_up)
        if not items:
            return
        started = time.monotonic()
        per_lease = _per_lease(items)
        await self.leases.fenced(per_lease)
        try:
            sessions = self.link.sessions
            write = functools.partial(self._commit, per_lease)
            outcomes = await self.link.call(write, what="a change log write")
        except SparkUnavailable:  # in flight at the loss: written once Spark is back
            self._queue.put_back(self._current(items))
            return
        took = time.monotonic() - started
        done: list[Pending] = []
        written: list[Written] = []
        again: list[Pending] = []
        for lease, outcome in outcomes.items():
            if isinstance(outcome, Written):
                written.append(outcome)
                done.extend(per_lease[lease])
                if outcome.synced:  # the cost of taking a lease, in the change log
                    log.info(
                        "spark.synced", lease=lease, seconds=round(outcome.sync_s, 3), ahead=False
                    )
            elif await self.link.lost_by(sessions, outcome):
                again.extend(per_lease[lease])
            else:
                self._fail(lease, per_lease[lease], outcome)
        self._queue.put_back(self._current(again))
        self.caught_breath.set()
        if not written:
            return
        self.stats.count(written, took)
        if self._settling is not None:
            await self._settling  # one write settles while the next is written, no more
        self._settling = asyncio.create_task(self._settle(done), name="spark-settle")

    def _current(self, items: list[Pending]) -> list[Pending]:
        return self.leases.current(items, self._give_up)

    def _give_up(self, item: Pending, error: BaseException | None = None) -> None:
        """A batch not to be written: its worker learns why (Spark away, by default)."""
        _resolve(item.done, error or SparkUnavailable(self.link.outage))

    async def _give_up_pending(self) -> None:
        """The sink closes while Spark is away: what is queued is not written (the leases' next
        owners read it again from their checkpoints)."""
        self.caught_breath.set()
        left = await self._queue.take_all()
        for item in left:
            self._give_up(item)
        if left:
            log.warning("spark.left_unwritten", rows=sum(i.table.num_rows for i in left))

    def _fail(self, lease: str, items: list[Pending], error: BaseException) -> None:
        """The lease's append failed: its batches and those queued behind them fail."""
        _log_failed(lease, sum(i.table.num_rows for i in items), error, self.stats)
        self.leases.fail(lease, error)
        for item in items:
            _resolve(item.done, error)

    async def _settle(self, items: list[Pending]) -> None:
        """A committed write's checkpoints, one per lease (its newest batch's mark covers the
        older ones). Runs beside the next Spark write."""
        if pause := self._pauses.after_commit_s:
            self._pauses = dataclasses.replace(self._pauses, after_commit_s=0.0)
            await asyncio.sleep(pause)
        await asyncio.gather(*(_checkpoint(batches) for batches in _per_lease(items).values()))

    def _commit(
        self, per_lease: Mapping[str, list[Pending]], sessions: Sessions
    ) -> dict[str, Written | BaseException]:
        """One write: each lease's rows appended, side by side (blocking); per lease, what
        was written or why not."""
        tables = {lease: _joined(batches) for lease, batches in per_lease.items()}
        hold: Hold | None = None
        if self._written and (flag := self._pauses.hold_file):
            self._pauses = dataclasses.replace(self._pauses, hold_file="")
            log.info("spark.holding_write", until=flag)
            hold = held_until(flag)
        self._written += 1
        return append_each(self.changes, sessions.writer, self.leases.fences, tables, hold)


async def open_tables(link: SparkLink, options: SparkOptions) -> None:
    """The sessions (`SparkLink.open`), then the tables, timed."""
    started = time.monotonic()
    sessions = await link.open()
    opened_s = time.monotonic() - started

    def make(opened: Sessions) -> None:
        local, history = opened.remote is None, options.keep_history
        create_tables(
            opened.writer,
            options.output,
            is_local_spark=local,
            history=history,
            hints=options.hints,
        )

    if sessions.remote is None:  # an embedded JVM: a host stopped meanwhile exits at once
        await in_daemon_thread(functools.partial(make, sessions))
    else:  # a server that hangs meanwhile is given up, a lost one waited for (`SparkLink`)
        await call_patiently(link, make, what="the tables")
    tables_s = time.monotonic() - started - opened_s
    log.info("spark.opened", session_s=round(opened_s, 1), tables_s=round(tables_s, 1))


def _log_failed(lease: str, rows: int, error: BaseException, stats: SinkStats) -> None:
    if isinstance(error, LeaseFenced):
        stats.fenced += 1
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


def _joined(batches: list[Pending]) -> pa.Table:
    """One lease's batches of a write as one Arrow table, one chunk: Spark's one hand-over."""
    return pa.concat_tables(i.table for i in batches).combine_chunks()


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


async def _first_of(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def _spawn(work: Coroutine[Any, Any, None]) -> None:
    asyncio.get_running_loop().create_task(work)


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
