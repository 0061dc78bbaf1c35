"""The hints appender's cadence: batches that come while a commit is in flight wait for the next
one (one commit at a time per host, never two racing for the table's next version), and each
batch returns only once the commit that holds it is in."""

from __future__ import annotations

import asyncio

import pyarrow as pa

from observers.builtin.spark.changelog.hint_appends import HintAppends


class GatedCommit:
    """Holds each commit until `gate` is set, counting how many are in flight at once."""

    def __init__(self) -> None:
        self.running = self.most = 0
        self.gate = asyncio.Event()
        self.commits: list[list[int]] = []

    async def __call__(self, table: pa.Table) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.gate.wait()
            self.commits.append(table.column("n").to_pylist())
        finally:
            self.running -= 1


async def _turns(n: int = 50) -> None:
    """Let every task that can run do so, `n` times over."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_batches_that_come_during_a_commit_go_into_the_next_one_never_beside_it() -> None:
    commit = GatedCommit()
    appends = HintAppends(commit, max_wait_s=0, writer="test")
    first = asyncio.create_task(appends.append(pa.table({"n": [0]})))
    await _turns()
    assert commit.running == 1  # the first commit is in flight, held
    later = [asyncio.create_task(appends.append(pa.table({"n": [n]}))) for n in range(1, 11)]
    await _turns()
    assert commit.running == 1 and commit.commits == []  # no second commit beside it
    assert not first.done() and not any(t.done() for t in later)  # none returns before its commit
    commit.gate.set()
    await asyncio.gather(first, *later)
    assert commit.commits == [[0], list(range(1, 11))]  # the ten that came meanwhile: the next
    assert commit.most == 1


async def test_a_failed_commit_fails_each_batch_it_held_and_the_next_commit_goes_on() -> None:
    failing = True
    commits: list[list[int]] = []

    async def commit(table: pa.Table) -> None:
        if failing:
            raise OSError("storage away")
        commits.append(table.column("n").to_pylist())

    appends = HintAppends(commit, max_wait_s=0, writer="test")
    results = await asyncio.gather(
        *(appends.append(pa.table({"n": [n]})) for n in range(3)), return_exceptions=True
    )
    assert [type(r) for r in results] == [OSError] * 3  # each refused: its messages come back
    failing = False
    await appends.append(pa.table({"n": [9]}))
    assert commits == [[9]]
