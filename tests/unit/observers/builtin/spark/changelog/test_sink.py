"""The Spark sink's batching without Spark: a write's checkpoints come after its commits, a failed
or fenced append stops its lease's later batches and no other lease's, batches left empty are
still checkpointed."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import structlog
from structlog.testing import capture_logs

import observers.builtin.spark.observer as spark_observer
from observers.builtin.spark.changelog.change_log import Hold, LeaseFenced, Written
from observers.builtin.spark.changelog.fence import LeaseFence
from observers.builtin.spark.changelog.sink import SparkSink
from observers.builtin.spark.observer import SparkObserver, SparkWriteError
from observers.builtin.spark.session.output import parse_output
from observers.builtin.spark.session.session import SparkOptions
from observers.host_side import delivering, host_context
from observers.origin import Origin
from observers.protocol import ArrowBatch, PartitionContext
from tests import patience
from tests.state_model import Event, changes

ORIGIN = Origin("00", "idx/segments/2026/01/01/0100/meta.json")


class FakeLog:
    """Records each lease's appends, in order, with the fence it was given; the first append of
    each lease in `fail` raises (a `LeaseFenced` for those in `fence`); `gate` holds appends."""

    def __init__(self, *, fail: set[str] | None = None, fence: set[str] | None = None) -> None:
        self.writes: list[tuple[str, list[str]]] = []
        self.fences: dict[str, LeaseFence] = {}
        self.fail = set(fail or ())
        self.fence = set(fence or ())
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fenced_ahead: list[tuple[str, int]] = []
        self.synced_ahead: list[tuple[str, int, str | None]] = []
        self._lock = threading.Lock()
        self.threads: list[tuple[str, str, dict[str, Any]]] = []  # call, thread, log fields

    def fence_ahead(self, session: Any, fence: LeaseFence) -> int:
        self.threads.append(("fence_ahead", threading.current_thread().name, _bound()))
        with self._lock:
            self.fenced_ahead.append((fence.lease, fence.epoch))
            assert not any(lease == fence.lease for lease, _ in self.writes[-1:])
        fence.fenced_in(fence.generation)
        return 1

    def sync(
        self, session: Any, fence: LeaseFence, *, at_least: str | None, generation: int | None
    ) -> int:
        self.threads.append(("sync", threading.current_thread().name, _bound()))
        with self._lock:
            self.synced_ahead.append((fence.lease, fence.epoch, at_least))
            assert fence.fenced, "the floor read before the fence"
            assert not any(lease == fence.lease for lease, _ in self.writes[-1:])
        fence.synced_at(None, generation)
        return 0

    def write(
        self, session: Any, fence: LeaseFence, table: pa.Table, *, hold: Hold | None = None
    ) -> Written:
        self.threads.append(("write", threading.current_thread().name, _bound()))
        self.entered.set()
        assert self.gate.wait(patience.left_s())
        with self._lock:
            self.writes.append((fence.lease, table.column("id").to_pylist()))
            self.fences[fence.lease] = fence
            if fence.lease in self.fail:
                self.fail.discard(fence.lease)
                if fence.lease in self.fence:
                    raise LeaseFenced(fence.lease, fence.epoch, 7, "a newer owner's fence")
                raise RuntimeError("the Spark write failed")
        return Written(table.num_rows, table.num_rows, 1)


@contextlib.asynccontextmanager
async def sink(
    tmp_path: Path, log: FakeLog, *, leases: tuple[str, ...] = ("00", "01"), **options: Any
) -> AsyncIterator[SparkSink]:
    """An open sink on `log`, with `leases` opened at epoch 1 (the sink writes no lease that
    was never opened)."""
    settings = SparkOptions(parse_output(str(tmp_path)), max_wait_s=0.05, min_rows=1, **options)
    async with SparkSink(settings, writer=log, session=object()) as s:
        for lease in leases:
            s.open_lease(lease, 1)
        yield s


def rows(lease: str, *seqs: int) -> pa.Table:
    return changes([Event(0, s, "created", 1) for s in seqs], shard=lease)


async def test_leases_share_a_write_and_are_checkpointed_after_it(tmp_path: Path) -> None:
    log = FakeLog()
    log.gate.clear()
    done: list[str] = []

    def mark(name: str) -> Any:
        async def on_commit() -> None:
            assert log.writes, "checkpointed before the write"
            done.append(name)

        return on_commit

    async with sink(tmp_path, log) as s:
        first = await s.submit("00", rows("00", 1), mark("00/1"))
        await asyncio.to_thread(log.entered.wait, patience.left_s())  # the first write is under way
        later = [
            await s.submit("00", rows("00", 2), mark("00/2")),
            await s.submit("01", rows("01", 3), mark("01/3")),
        ]
        log.gate.set()
        await asyncio.gather(first, *later)
    assert log.writes[0] == ("00", ["id-0-1"])
    assert sorted(log.writes[1:]) == [("00", ["id-0-2"]), ("01", ["id-0-3"])]
    assert done[0] == "00/1" and sorted(done[1:]) == ["00/2", "01/3"]  # after its write
    assert (s.stats.writes, s.stats.rows) == (2, 3)  # three batches, two writes


async def test_a_failed_write_fails_the_leases_queued_batches_unwritten(tmp_path: Path) -> None:
    log = FakeLog(fail={"00"})
    log.gate.clear()
    checkpoints: list[str] = []

    def mark(name: str) -> Any:
        async def on_commit() -> None:
            checkpoints.append(name)

        return on_commit

    async with sink(tmp_path, log) as s:
        lost = await s.submit("00", rows("00", 1), mark("00/1"))
        await asyncio.to_thread(log.entered.wait, patience.left_s())
        behind = await s.submit("00", rows("00", 2), mark("00/2"))  # queued behind the failure
        other = await s.submit("01", rows("01", 3), mark("01/3"))
        log.gate.set()
        for future in (lost, behind):
            with pytest.raises(RuntimeError, match="the Spark write failed"):
                await future
        await other
        s.open_lease("00", 1)  # the lease is opened again: it reads from its checkpoint
        await (await s.submit("00", rows("00", 1, 2), mark("00/again")))
    assert log.writes == [("00", ["id-0-1"]), ("01", ["id-0-3"]), ("00", ["id-0-1", "id-0-2"])]
    assert checkpoints == ["01/3", "00/again"]  # never past the lost batch


async def test_a_fenced_lease_fails_alone_and_its_next_open_syncs_at_its_new_epoch(
    tmp_path: Path,
) -> None:
    log = FakeLog(fail={"00"}, fence={"00"})
    checkpoints: list[str] = []

    def mark(name: str) -> Any:
        async def on_commit() -> None:
            checkpoints.append(name)

        return on_commit

    with capture_logs() as logged:
        async with sink(tmp_path, log, leases=(), max_rows=10) as s:
            await fenced_then_reopened(s, log, mark)
    assert checkpoints == ["01/2", "00/again"]
    assert log.fenced_ahead == [("00", 3), ("01", 3), ("00", 5)]  # at each open, before writes
    first = [(lease, epoch) for lease, epoch, _ in log.synced_ahead]
    assert first == [("00", 3), ("01", 3), ("00", 5)]  # the floor at its first batch, after it
    assert [w for w in log.writes if w[0] == "00"] == [("00", ["id-0-1"])] * 2
    assert log.synced_ahead[1][2] == rows("01", 2)["position"][0].as_py()  # from its first event
    fenced = [e for e in logged if e["event"] == "spark.fenced"]
    assert [(e["lease"], e["epoch"]) for e in fenced] == [("00", 3)]


async def fenced_then_reopened(s: SparkSink, log: FakeLog, mark: Any) -> None:
    """Lease 00 fenced beside lease 01 in one write, then taken again at a newer epoch."""
    s.open_lease("00", 3, "p")
    s.open_lease("01", 3, "p")
    log.gate.clear()
    fenced = await s.submit("00", rows("00", 1), mark("00/1"))
    other = await s.submit("01", rows("01", 2), mark("01/2"))
    log.gate.set()
    with pytest.raises(LeaseFenced, match="lease 00 at epoch 3"):
        await fenced
    await other
    assert s.stats.fenced == 1
    fence = log.fences["00"]
    assert (fence.app_id, fence.epoch) == ("p/00", 3)
    s.open_lease("00", 5, "p")  # taken again, at a newer epoch
    assert (fence.epoch, fence.sequence, fence.synced) == (5, -1, False)
    await (await s.submit("00", rows("00", 1), mark("00/again")))


async def test_an_observer_leaves_out_the_output_container_and_still_checkpoints(
    tmp_path: Path,
) -> None:
    log = FakeLog()
    positions: list[object] = []

    async def checkpoint(mark: object | None) -> None:
        positions.append(mark)

    ctx = host_context(lease_token="00", host_name="h", epoch=1, on_checkpoint=checkpoint)
    ours = [e.record() for e in (Event(0, 1, "created", 1), Event(2, 2, "created", 1))]
    async with sink(tmp_path, log) as s:
        observer = SparkObserver(s, excluded="c2")
        await observer.open(ctx)
        for n, records in enumerate(([ours[0], ours[1]], [ours[1]])):
            keys = [f"p{n}{i}" for i in range(len(records))]
            batch = ArrowBatch.from_records(records, keys, ORIGIN)
            with delivering(ctx, f"mark-{n}"):
                await observer.process_arrow(ctx, batch)
        await observer.close(ctx, None)  # type: ignore[arg-type]
    assert log.writes == [("00", ["id-0-1"])]  # the c2 event never reached Spark
    assert positions[-1] == "mark-1"  # the batch of c2 alone was checkpointed too


async def test_an_observer_builds_its_arrow_rows_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Arrow conversion is CPU work of every batch: on the loop it delays lease renewals."""
    threads: set[int] = set()
    build = spark_observer.changes_table

    def spying(events: Any) -> pa.Table:
        threads.add(threading.get_ident())
        return build(events)

    monkeypatch.setattr(spark_observer, "changes_table", spying)

    async def checkpoint(mark: object | None) -> None:
        pass

    ctx = host_context(lease_token="00", host_name="h", epoch=1, on_checkpoint=checkpoint)
    async with sink(tmp_path, FakeLog()) as s:
        observer = SparkObserver(s)
        await observer.open(ctx)
        batch = ArrowBatch.from_records([Event(0, 1, "created", 1).record()], ["p0"], ORIGIN)
        with delivering(ctx, "mark-0"):
            await observer.process_arrow(ctx, batch)
        await observer.close(ctx, None)  # type: ignore[arg-type]
    assert threads and threading.get_ident() not in threads


async def test_a_batch_of_a_lease_never_opened_is_refused_unwritten(tmp_path: Path) -> None:
    log = FakeLog()
    async with sink(tmp_path, log, leases=("01",)) as s:
        with pytest.raises(RuntimeError, match="lease 00: a batch came before the lease was"):
            await (await s.submit("00", rows("00", 1), _nothing))
    assert log.writes == []


async def test_a_lease_whose_write_failed_refuses_its_next_batch(tmp_path: Path) -> None:
    log = FakeLog(fail={"00"})
    ctx = PartitionContext(lease_token="00", host_name="h", epoch=1)
    record = Event(0, 1, "created", 1).record()
    async with sink(tmp_path, log) as s:
        observer = SparkObserver(s)
        batch = ArrowBatch.from_records([record], ["p0"], ORIGIN)
        with delivering(ctx, "m"):
            await observer.process_arrow(ctx, batch)
            await asyncio.wait(observer._in_flight)  # the write has failed
            with pytest.raises(SparkWriteError):
                await observer.process_arrow(ctx, batch)


async def test_a_close_that_gives_up_waiting_leaves_the_sink_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's close stops waiting for a slow write (its lease is gone by then); the write
    must still settle, and the host's other leases go on writing through the same sink."""
    monkeypatch.setattr("observers.builtin.spark.observer.CLOSE_TIMEOUT_S", 0.2)
    log = FakeLog()
    log.gate.clear()
    checkpoints: list[object] = []

    async def checkpoint(mark: object | None) -> None:
        checkpoints.append(mark)

    record = Event(0, 1, "created", 1).record()
    batch = ArrowBatch.from_records([record], ["p0"], ORIGIN)
    async with sink(tmp_path, log) as s:
        slow = SparkObserver(s)
        ctx = host_context(lease_token="00", host_name="h", epoch=1, on_checkpoint=checkpoint)
        with delivering(ctx, "slow"):
            await slow.process_arrow(ctx, batch)
        await asyncio.to_thread(log.entered.wait, patience.left_s())
        with pytest.raises(TimeoutError):
            await slow.close(ctx, None)  # type: ignore[arg-type]
        log.gate.set()
        other = await s.submit("01", rows("01", 3), lambda: asyncio.sleep(0))
        async with asyncio.timeout(patience.left_s()):
            await other
    assert checkpoints == ["slow"]  # the slow write was checkpointed once it was in
    assert log.writes == [("00", ["id-0-1"]), ("01", ["id-0-3"])]


async def test_batches_are_taken_while_warming_up_and_written_after_it(tmp_path: Path) -> None:
    """The warm-up runs in the writer's task: the sink is open (the host takes its leases and
    reads) at once, and the first write waits for the warm-up to end."""
    log, warming, warm = FakeLog(), threading.Event(), threading.Event()

    def warm_up() -> None:
        warming.set()
        assert warm.wait(patience.left_s())

    settings = SparkOptions(parse_output(str(tmp_path)), max_wait_s=0.05, min_rows=1)
    async with SparkSink(settings, writer=log, session=object(), warm_up=warm_up) as s:
        s.open_lease("00", 1)
        assert await asyncio.to_thread(warming.wait, patience.left_s())
        first = await s.submit("00", rows("00", 1), _nothing)
        for _ in range(10):  # min_rows=1: a sink not waiting for its warm-up would take it now
            await asyncio.sleep(0)
        assert s.health().details["pendingRows"] == 1  # still queued: nothing took it
        assert not log.writes and not first.done()
        warm.set()
        await first
    assert log.writes == [("00", ["id-0-1"])]


async def test_a_failed_warm_up_only_costs_slower_first_writes(tmp_path: Path) -> None:
    def warm_up() -> None:
        raise RuntimeError("no room for the scratch table")

    log = FakeLog()
    settings = SparkOptions(parse_output(str(tmp_path)), max_wait_s=0.05, min_rows=1)
    async with SparkSink(settings, writer=log, session=object(), warm_up=warm_up) as s:
        s.open_lease("00", 1)
        await (await s.submit("00", rows("00", 1), _nothing))
    assert log.writes == [("00", ["id-0-1"])]


async def _nothing() -> None:
    return None


async def test_the_spark_calls_run_in_threads_of_the_sinks_own(tmp_path: Path) -> None:
    """Writes, fences and syncs: none in the event loop's default threads, which the host's
    decoders use, so a Spark call that hangs (an executor lost mid-write) holds none of them."""
    log = FakeLog()
    with structlog.contextvars.bound_contextvars(host="h9"):  # as a host binds its name
        async with sink(tmp_path, log) as s:
            await (await s.submit("00", rows("00", 1), _nothing))
            assert await s.leases.floor("01", "p") is None
    assert {"write", "fence_ahead", "sync"} <= {call for call, _, _ in log.threads}
    assert all(name.startswith("cfp-spark") for _, name, _ in log.threads), log.threads
    assert all(bound == {"host": "h9"} for _, _, bound in log.threads)  # its log fields too


async def _nothing() -> None:
    return None


def _bound() -> dict[str, Any]:
    return structlog.contextvars.get_contextvars()
