"""The Spark sink while its Spark Connect server is lost, without Spark: the write in flight is
written again once a server answers (after every open lease synced again), a lease queues at
most a write's worth meanwhile, and a lease let go of, or the sink closed, gives up what it
queued instead of waiting for a server that may never come back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from observers.builtin.spark.changelog.change_log import Hold, Written
from observers.builtin.spark.changelog.fence import LeaseFence
from observers.builtin.spark.changelog.sink import SparkSink
from observers.builtin.spark.observer import SparkObserver
from observers.builtin.spark.session.link import LinkTiming, SparkLink, SparkUnavailable
from observers.builtin.spark.session.output import parse_output
from observers.builtin.spark.session.session import SparkOptions
from observers.host_side import delivering, host_context
from observers.protocol import ArrowBatch, CloseReason, PartitionContext
from tests import patience
from tests.helpers import until as eventually
from tests.state_model import Event
from tests.unit.observers.builtin.spark.changelog.test_sink import ORIGIN, FakeLog, rows
from tests.unit.observers.builtin.spark.session.test_link import REMOTES, Fleet, Hand, refused


class LosingLog(FakeLog):
    """A change log whose server is lost during the first write of each lease in `lose` (the
    rows recorded as attempted, the write raising what PySpark raises then)."""

    def __init__(self, fleet: Fleet, *, lose: set[str]) -> None:
        super().__init__()
        self.fleet, self.lose = fleet, set(lose)
        self.attempts: list[tuple[str, list[str]]] = []

    def write(
        self, session: Any, fence: LeaseFence, table: pa.Table, *, hold: Hold | None = None
    ) -> Written:
        self.attempts.append((fence.lease, table.column("id").to_pylist()))
        if fence.lease in self.lose:
            self.lose.discard(fence.lease)
            server = session.server
            server.up = False
            raise refused(server.remote)
        return super().write(session, fence, table, hold=hold)


@contextlib.asynccontextmanager
async def sink(
    tmp_path: Path, log: FakeLog, fleet: Fleet, *, leases: tuple[str, ...] = ("00", "01"), **o: Any
) -> AsyncIterator[SparkSink]:
    options = SparkOptions(
        parse_output(str(tmp_path)), max_wait_s=0.05, min_rows=1, remotes=REMOTES, **o
    )
    hand = Hand()
    pool = ThreadPoolExecutor(4)
    timing = LinkTiming(wall=hand.wall, sleep=hand.sleep)
    link = SparkLink(options, host="h1", calls=pool, opener=fleet.open, timing=timing)
    await link.open()
    try:
        async with SparkSink(options, writer=log, link=link) as s:
            for lease in leases:
                s.open_lease(lease, 1)
            yield s
    finally:
        await link.close()
        pool.shutdown(wait=False)


def mark(done: list[str], name: str) -> Any:
    async def on_commit() -> None:
        done.append(name)

    return on_commit


async def until(check: Any, what: str) -> None:
    """Until `check()` holds (a synchronous look at the link, the sink or the hand clock)."""

    async def look() -> bool:
        return bool(check())

    await eventually(look, what, every_s=0.005)


async def test_the_write_in_flight_at_the_loss_is_written_once_a_server_answers(
    tmp_path: Path,
) -> None:
    fleet = Fleet(*REMOTES)
    log = LosingLog(fleet, lose={"00"})
    done: list[str] = []
    with capture_logs() as logged:
        async with sink(tmp_path, log, fleet) as s:
            await until(lambda: len(log.fenced_ahead) == 2, "both leases fenced as they opened")
            log.gate.clear()  # the write after the loss waits (the one lost raises before it)
            first = await s.submit("00", rows("00", 1), mark(done, "00/1"))
            await until(lambda: len(log.attempts) == 2, "the lost write tried again")
            assert not s.caught_breath.is_set()  # the state job waits for it
            log.gate.set()
            await first  # written on the next server, not failed
            assert s.caught_breath.is_set()
            second = await s.submit("00", rows("00", 2), mark(done, "00/2"))
            await second
    assert log.attempts[:2] == [("00", ["id-0-1"])] * 2  # lost once, then written
    assert log.writes == [("00", ["id-0-1"]), ("00", ["id-0-2"])]
    assert done == ["00/1", "00/2"]  # each checkpointed once, after its commit
    refenced = sorted(lease for lease, _ in log.fenced_ahead[2:])
    assert refenced == ["00", "01"]  # every open lease fenced again on the new session
    events = [e["event"] for e in logged]
    assert "spark.unavailable" in events and "spark.available" in events
    assert "spark.write_failed" not in events  # a server lost is no failed write
    assert s.link.losses == 1 and s.link.sessions.generation == 2


async def test_while_spark_is_away_a_lease_queues_a_write_and_is_then_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("observers.builtin.spark.changelog.sink.AWAY_WAIT_S", 0.05)
    fleet = Fleet(*REMOTES)
    log = LosingLog(fleet, lose={"00"})
    async with sink(tmp_path, log, fleet, max_rows=4) as s:
        for remote in REMOTES:  # no server answers from the first write on
            fleet[remote].up = False
        queued = [await s.submit("00", rows("00", 1, 2), _nothing)]
        await until(lambda: not s.link.is_up, "the server lost")
        queued.append(await s.submit("00", rows("00", 3, 4), _nothing))  # 4 rows: a write's worth
        with pytest.raises(SparkUnavailable, match="spark unavailable since"):
            await s.submit("00", rows("00", 5), _nothing)
        queued.append(await s.submit("01", rows("01", 6), _nothing))  # another lease still may
        health = s.health()
        assert health.outage is not None and health.details["pendingRows"] == 5
        fleet[REMOTES[0]].up = True
        await asyncio.gather(*queued)  # all of it written once a server answers
    written = {lease: ids for lease, ids in log.writes}
    assert written == {"00": ["id-0-1", "id-0-2", "id-0-3", "id-0-4"], "01": ["id-0-6"]}


async def test_a_lease_let_go_of_while_spark_is_away_gives_up_its_batches(
    tmp_path: Path,
) -> None:
    fleet = Fleet(*REMOTES)
    log = LosingLog(fleet, lose={"00"})
    ctx = PartitionContext(lease_token="00", host_name="h1", epoch=1)
    batch = ArrowBatch.from_records([Event(0, 1, "created", 1).record()], ["p0"], ORIGIN)
    async with sink(tmp_path, log, fleet, leases=("01",)) as s:
        for remote in REMOTES:
            fleet[remote].up = False
        observer = SparkObserver(s)
        await observer.open(ctx)
        with delivering(ctx, "m"):
            await observer.process_arrow(ctx, batch)
        await until(lambda: not s.link.is_up, "the server lost")
        await asyncio.wait_for(observer.close(ctx, CloseReason.SHUTDOWN), patience.left_s())
        assert s.health().details["pendingRows"] == 0
        fleet[REMOTES[1]].up = True
        await until(lambda: s.link.is_up, "a server back")
        await (await s.submit("01", rows("01", 2), _nothing))
    assert log.writes == [("01", ["id-0-2"])]  # nothing of the lease let go of


async def test_a_lease_handed_over_while_spark_is_away_lands_its_batches_if_a_server_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked for by another host while no server answers: the owner waits a while for one
    (`HANDOVER_SPARK_WAIT_S`), so that its next owner does not read again what it holds. One
    back in time writes them and the close returns after their checkpoint; with none, they are
    given up once the wait is over."""
    monkeypatch.setattr("observers.builtin.spark.observer.HANDOVER_SPARK_WAIT_S", 0.2)
    fleet = Fleet(*REMOTES)
    log = LosingLog(fleet, lose={"00", "01"})  # each lease's first write meets no server
    batch = ArrowBatch.from_records([Event(0, 1, "created", 1).record()], ["p0"], ORIGIN)
    checkpoints: list[object | None] = []

    async def on_checkpoint(mark: object | None) -> None:
        checkpoints.append(mark)

    async with sink(tmp_path, log, fleet, leases=()) as s:
        for remote in REMOTES:
            fleet[remote].up = False
        for token, back in (("00", True), ("01", False)):
            ctx = host_context(
                lease_token=token, host_name="h1", epoch=1, on_checkpoint=on_checkpoint
            )
            observer = SparkObserver(s)
            await observer.open(ctx)
            with delivering(ctx, f"m{token}"):
                await observer.process_arrow(ctx, batch)
            await until(lambda: not s.link.is_up, "the server lost")
            closing = asyncio.create_task(observer.close(ctx, CloseReason.HANDED_OVER))
            await asyncio.sleep(0)  # one turn of the loop: the close's first step
            assert not closing.done()  # waiting for a server
            if back:
                fleet[REMOTES[1]].up = True
            await asyncio.wait_for(closing, patience.left_s())
            if back:
                for remote in REMOTES:
                    fleet[remote].up = False
        assert s.health().details["pendingRows"] == 0
    assert log.writes == [("00", ["id-0-1"])]  # landed; 01's given up with no server back
    assert checkpoints == ["m00"]


async def test_a_sink_closing_while_spark_is_away_gives_up_and_returns(tmp_path: Path) -> None:
    fleet = Fleet(*REMOTES)
    log = LosingLog(fleet, lose={"00"})
    with capture_logs() as logged:
        async with sink(tmp_path, log, fleet) as s:
            for remote in REMOTES:
                fleet[remote].up = False
            queued = await s.submit("00", rows("00", 1), _nothing)
            await until(lambda: not s.link.is_up, "the server lost")
    with pytest.raises(SparkUnavailable):
        await queued
    left = [e for e in logged if e["event"] == "spark.left_unwritten"]
    assert [e["rows"] for e in left] == [1] and log.writes == []


async def _nothing() -> None:
    return None
