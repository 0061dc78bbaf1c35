"""The hints appender's cadence: batches that come while a commit is in flight wait for the next
one (one commit at a time per host, never two racing for the table's next version), and each
batch returns only once the commit that holds it is in."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from observers.builtin.spark.changelog.hint_appends import HintAppends

COMMIT_S = 0.2


class SlowLink:
    """Runs each call after `COMMIT_S`, counting how many run at once."""

    def __init__(self) -> None:
        self.running = self.most = 0

    async def call(self, fn: Callable[[Any], Any], *, what: str) -> Any:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(COMMIT_S)
            return fn(None)
        finally:
            self.running -= 1


async def test_batches_that_come_during_a_commit_go_into_the_next_one_never_beside_it() -> None:
    link = SlowLink()
    appends = HintAppends(link, "file:///nowhere/hints", max_wait_s=0.01)  # type: ignore[arg-type]
    commits: list[list[int]] = []
    appends._write = lambda _, table: commits.append(table.column("n").to_pylist())  # type: ignore[method-assign]
    returned: list[int] = []

    async def one(n: int) -> None:
        await asyncio.sleep(n * 0.02)  # a batch every 20 ms: ten come during each commit
        await appends.append(pa.table({"n": [n]}))
        returned.append(n)
        assert any(n in c for c in commits)  # in a commit that is in

    await asyncio.gather(*(one(n) for n in range(40)))
    assert link.most == 1
    assert sorted(n for c in commits for n in c) == list(range(40))  # each once
    assert len(commits) <= 40 * 0.02 / COMMIT_S + 2  # a commit per COMMIT_S, not per batch
    assert sorted(returned) == list(range(40))
