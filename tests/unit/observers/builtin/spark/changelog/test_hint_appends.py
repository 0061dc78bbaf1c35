"""The hints appender's cadence: batches that come while a commit is in flight wait for the next
one (one commit at a time per host, never two racing for the table's next version), and each
batch returns only once the commit that holds it is in."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from observers.builtin.spark.changelog.hint_appends import HintAppends


class GatedLink:
    """Holds each call until `gate` is set, counting how many are in flight at once."""

    def __init__(self) -> None:
        self.running = self.most = 0
        self.gate = asyncio.Event()

    async def call(self, fn: Callable[[Any], Any], *, what: str) -> Any:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.gate.wait()
            return fn(None)
        finally:
            self.running -= 1


async def _turns(n: int = 50) -> None:
    """Let every task that can run do so, `n` times over."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_batches_that_come_during_a_commit_go_into_the_next_one_never_beside_it() -> None:
    link = GatedLink()
    appends = HintAppends(link, "file:///nowhere/hints", max_wait_s=0)  # type: ignore[arg-type]
    commits: list[list[int]] = []
    appends._write = lambda _, table: commits.append(table.column("n").to_pylist())  # type: ignore[method-assign]
    first = asyncio.create_task(appends.append(pa.table({"n": [0]})))
    await _turns()
    assert link.running == 1  # the first commit is in flight, held
    later = [asyncio.create_task(appends.append(pa.table({"n": [n]}))) for n in range(1, 11)]
    await _turns()
    assert link.running == 1 and commits == []  # no second commit beside it
    assert not first.done() and not any(t.done() for t in later)  # none returns before its commit
    link.gate.set()
    await asyncio.gather(first, *later)
    assert commits == [[0], list(range(1, 11))]  # the ten that came meanwhile: the next commit
    assert link.most == 1
