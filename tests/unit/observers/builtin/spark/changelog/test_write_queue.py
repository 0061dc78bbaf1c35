"""The Spark sink's write queue alone: how much a write takes, back-pressure, when it is due."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa

from observers.builtin.spark.changelog.write_queue import Pending, WriteQueue
from observers.builtin.spark.session.output import parse_output
from observers.builtin.spark.session.session import SparkOptions
from tests import patience


def queue(tmp_path: Path, *, max_rows: int, min_rows: int) -> WriteQueue:
    options = SparkOptions(
        parse_output(str(tmp_path)), max_rows=max_rows, min_rows=min_rows, max_wait_s=60.0
    )
    return WriteQueue(options)


def batch(lease: str, n: int) -> Pending:
    async def on_commit() -> None:
        return None

    return Pending(lease, pa.table({"id": list(range(n))}), on_commit)


async def test_a_write_takes_the_oldest_batches_up_to_its_worth_and_at_least_one(
    tmp_path: Path,
) -> None:
    q = queue(tmp_path, max_rows=12, min_rows=12)
    async with asyncio.timeout(patience.left_s()):
        for item in (batch("00", 13), batch("01", 4), batch("00", 5), batch("02", 6)):
            await q.put(item)
        taken = [await q.take_write() for _ in range(3)]
    assert [([i.lease for i in items], rows) for items, rows, _ in taken] == [
        (["00"], 13),  # more than a write's worth alone: still taken
        (["01", "00"], 9),
        (["02"], 6),
    ]
    assert not q.has_pending


async def test_a_submitter_waits_while_twice_a_writes_worth_is_pending(tmp_path: Path) -> None:
    q = queue(tmp_path, max_rows=5, min_rows=5)
    await q.put(batch("00", 10))
    blocked = asyncio.create_task(q.put(batch("01", 1)))
    await asyncio.sleep(0)
    assert not blocked.done()
    await q.take_write()
    async with asyncio.timeout(patience.left_s()):
        await blocked
    items, rows, _ = await q.take_write()
    assert ([i.lease for i in items], rows) == (["01"], 1)


async def test_a_write_is_due_at_once_when_full_or_closed(tmp_path: Path) -> None:
    q = queue(tmp_path, max_rows=100, min_rows=3)
    await q.put(batch("00", 3))  # min_rows there: no waiting for max_wait_s
    async with asyncio.timeout(patience.left_s()):
        await q.wait_for_write()
    await q.take_write()
    await q.put(batch("00", 1))
    waiting = asyncio.create_task(q.wait_for_write())
    await asyncio.sleep(0)
    assert not waiting.done()  # one row: it waits for others to share the write
    q.close()
    async with asyncio.timeout(patience.left_s()):
        await waiting
    assert q.has_pending and q.is_closed
