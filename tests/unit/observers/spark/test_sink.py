"""The Spark sink's batching without Spark: a write's checkpoints come after its commit, a failed
write stops its leases' later batches, batches left empty are still checkpointed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import observers.spark.observer as spark_observer
from observers.protocol import EventBatch, PartitionContext
from observers.spark.changelog import Inserted
from observers.spark.observer import SparkObserver, SparkWriteError
from observers.spark.output import parse_output
from observers.spark.session import SparkOptions
from observers.spark.sink import SparkSink
from tests import patience
from tests.state_model import Event, changes


class FakeLog:
    """Records what each write held; the first `fail` writes raise; `gate` holds writes."""

    def __init__(self, *, fail: int = 0) -> None:
        self.writes: list[dict[str, list[str]]] = []
        self.fail = fail
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def insert_unseen(self, session: Any, tables: Mapping[str, pa.Table]) -> Inserted:
        self.entered.set()
        assert self.gate.wait(patience.left_s())
        self.writes.append({k: t.column("id").to_pylist() for k, t in tables.items()})
        if self.fail:
            self.fail -= 1
            raise RuntimeError("the Spark write failed")
        rows = sum(t.num_rows for t in tables.values())
        return Inserted(rows, rows, 1)


def sink(tmp_path: Path, log: FakeLog, **options: Any) -> SparkSink:
    settings = SparkOptions(parse_output(str(tmp_path)), max_wait_s=0.05, min_rows=1, **options)
    return SparkSink(settings, writer=log, session=object())


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
    assert log.writes == [{"00": ["id-0-1"]}, {"00": ["id-0-2"], "01": ["id-0-3"]}]
    assert done == ["00/1", "00/2", "01/3"]  # one checkpoint per lease and write, in order
    assert (s.stats.writes, s.stats.rows) == (2, 3)


async def test_a_failed_write_fails_the_leases_queued_batches_unwritten(tmp_path: Path) -> None:
    log = FakeLog(fail=1)
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
        s.forget("00")  # the lease is opened again: it reads from its checkpoint
        await (await s.submit("00", rows("00", 1, 2), mark("00/again")))
    assert log.writes == [{"00": ["id-0-1"]}, {"01": ["id-0-3"]}, {"00": ["id-0-1", "id-0-2"]}]
    assert checkpoints == ["01/3", "00/again"]  # never past the lost batch


async def test_an_observer_leaves_out_the_output_container_and_still_checkpoints(
    tmp_path: Path,
) -> None:
    log = FakeLog()
    positions: list[object] = []

    async def checkpoint(mark: object | None) -> None:
        positions.append(mark)

    ctx = PartitionContext(lease_token="00", host_name="h", epoch=1, on_checkpoint=checkpoint)
    ours = [e.record() for e in (Event(0, 1, "created", 1), Event(2, 2, "created", 1))]
    async with sink(tmp_path, log) as s:
        observer = SparkObserver(s, excluded="c2")
        await observer.open(ctx)
        for n, records in enumerate(([ours[0], ours[1]], [ours[1]])):
            batch = EventBatch.from_records(records, [f"p{n}{i}" for i in range(len(records))], shard="00",
                               segment="idx/segments/2026/01/01/0100/meta.json")  # fmt: skip
            with ctx.delivering(f"mark-{n}"):
                await observer.process_changes(ctx, batch)
        await observer.close(ctx, None)  # type: ignore[arg-type]
    assert log.writes == [{"00": ["id-0-1"]}]  # the c2 event never reached Spark
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

    ctx = PartitionContext(lease_token="00", host_name="h", epoch=1, on_checkpoint=checkpoint)
    async with sink(tmp_path, FakeLog()) as s:
        observer = SparkObserver(s)
        await observer.open(ctx)
        batch = EventBatch.from_records([Event(0, 1, "created", 1).record()], ["p0"], shard="00",
                           segment="idx/segments/2026/01/01/0100/meta.json")  # fmt: skip
        with ctx.delivering("mark-0"):
            await observer.process_changes(ctx, batch)
        await observer.close(ctx, None)  # type: ignore[arg-type]
    assert threads and threading.get_ident() not in threads


async def test_a_lease_whose_write_failed_refuses_its_next_batch(tmp_path: Path) -> None:
    log = FakeLog(fail=1)
    ctx = PartitionContext(lease_token="00", host_name="h", epoch=1)
    record = Event(0, 1, "created", 1).record()
    async with sink(tmp_path, log) as s:
        observer = SparkObserver(s)
        batch = EventBatch.from_records([record], ["p0"], shard="00",
                           segment="idx/segments/2026/01/01/0100/meta.json")  # fmt: skip
        with ctx.delivering("m"):
            await observer.process_changes(ctx, batch)
            await asyncio.wait(observer._in_flight)  # the write has failed
            with pytest.raises(SparkWriteError):
                await observer.process_changes(ctx, batch)


async def test_a_close_that_gives_up_waiting_leaves_the_sink_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's close stops waiting for a slow write (its lease is gone by then); the write
    must still settle, and the host's other leases go on writing through the same sink."""
    monkeypatch.setattr("observers.spark.observer.CLOSE_TIMEOUT_S", 0.2)
    log = FakeLog()
    log.gate.clear()
    checkpoints: list[object] = []

    async def checkpoint(mark: object | None) -> None:
        checkpoints.append(mark)

    record = Event(0, 1, "created", 1).record()
    batch = EventBatch.from_records([record], ["p0"], shard="00",
                       segment="idx/segments/2026/01/01/0100/meta.json")  # fmt: skip
    async with sink(tmp_path, log) as s:
        slow = SparkObserver(s)
        ctx = PartitionContext(lease_token="00", host_name="h", epoch=1, on_checkpoint=checkpoint)
        with ctx.delivering("slow"):
            await slow.process_changes(ctx, batch)
        await asyncio.to_thread(log.entered.wait, patience.left_s())
        with pytest.raises(TimeoutError):
            await slow.close(ctx, None)  # type: ignore[arg-type]
        log.gate.set()
        other = await s.submit("01", rows("01", 3), lambda: asyncio.sleep(0))
        async with asyncio.timeout(5):
            await other
    assert checkpoints == ["slow"]  # the slow write was checkpointed once it was in
    assert log.writes == [{"00": ["id-0-1"]}, {"01": ["id-0-3"]}]


async def test_batches_are_taken_while_warming_up_and_written_after_it(tmp_path: Path) -> None:
    """The warm-up runs in the writer's task: the sink is open (the host takes its leases and
    reads) at once, and the first write waits for the warm-up to end."""
    log, warming, warm = FakeLog(), threading.Event(), threading.Event()

    def warm_up() -> None:
        warming.set()
        assert warm.wait(patience.left_s())

    settings = SparkOptions(parse_output(str(tmp_path)), max_wait_s=0.05, min_rows=1)
    async with SparkSink(settings, writer=log, session=object(), warm_up=warm_up) as s:
        assert await asyncio.to_thread(warming.wait, patience.left_s())
        first = await s.submit("00", rows("00", 1), _nothing)
        await asyncio.sleep(0.2)  # several max_wait_s: a write would have started by now
        assert not log.writes and not first.done()
        warm.set()
        await first
    assert log.writes == [{"00": ["id-0-1"]}]


async def test_a_failed_warm_up_only_costs_slower_first_writes(tmp_path: Path) -> None:
    def warm_up() -> None:
        raise RuntimeError("no room for the scratch table")

    log = FakeLog()
    settings = SparkOptions(parse_output(str(tmp_path)), max_wait_s=0.05, min_rows=1)
    async with SparkSink(settings, writer=log, session=object(), warm_up=warm_up) as s:
        await (await s.submit("00", rows("00", 1), _nothing))
    assert log.writes == [{"00": ["id-0-1"]}]


async def _nothing() -> None:
    return None
