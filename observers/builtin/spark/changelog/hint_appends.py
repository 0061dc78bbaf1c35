"""Hints into `OUTPUT/hints`: blind appends of the change log's columns, no fence (a hint written
twice is the same hint twice; the state job's sequencer guard makes a repeat change nothing), so
that the hosts' appends never conflict. Every batch given while a commit is due goes into that
commit: one Delta commit per `max_wait_s` per host, however many pages of the queue it holds, and
never two at once (a slow commit makes the next one bigger, not another one beside it, which
would race it for the table's next version). A batch returns once its commit is in (its queue
messages may then be deleted), or raises what the commit raised (`SparkUnavailable` while a
Spark Connect server is away, delta-rs's own while storage is: they come back).

Where the commit goes is `hint_writers`' choice: delta-rs straight into the table, or Spark."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import pyarrow as pa
import structlog

log = structlog.get_logger("cfp.spark")

Commit = Callable[[pa.Table], Awaitable[None]]  # one append of rows, in once it returns


class HintAppends:
    def __init__(self, commit: Commit, *, max_wait_s: float, writer: str) -> None:
        self.commit, self.max_wait_s, self.writer = commit, max_wait_s, writer
        self._pending: list[tuple[pa.Table, asyncio.Future[None]]] = []
        self._first_at = 0.0  # when the oldest pending batch came (loop time)
        self._due: asyncio.Task[None] | None = None
        self._now = asyncio.Event()  # commit without waiting (a host that stops)

    def use(self, commit: Commit, writer: str) -> None:
        """Commit with `commit` from now on (chosen once the tables exist)."""
        self.commit, self.writer = commit, writer

    async def append(self, rows: pa.Table) -> None:
        """Append `rows` with the next commit; returns once it is in."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        if not self._pending:
            self._first_at = loop.time()
        self._pending.append((rows, done))
        if self._due is None:
            self._due = asyncio.create_task(self._commits(), name="spark-hints")
        await done

    async def _commits(self) -> None:
        """One commit at a time, each `max_wait_s` after its oldest batch came, until none is
        pending."""
        try:
            while self._pending:
                wait_s = self._first_at + self.max_wait_s - asyncio.get_running_loop().time()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, wait_s)):
                        await self._now.wait()
                taken, self._pending = self._pending, []
                await self._commit(taken)
        finally:
            self._due = None

    async def _commit(self, taken: list[tuple[pa.Table, asyncio.Future[None]]]) -> None:
        table = pa.concat_tables([t for t, _ in taken])
        try:
            await self.commit(table)
        except BaseException as e:
            for _, done in taken:
                if not done.done():
                    done.set_exception(e)
            if not isinstance(e, Exception):
                raise
            log.warning(
                "spark.hints_not_written", rows=table.num_rows, writer=self.writer, error=repr(e)
            )
            return
        for _, done in taken:
            if not done.done():
                done.set_result(None)

    async def aclose(self) -> None:
        """Commit what is pending now (a host that stops)."""
        self._now.set()
        if self._due is not None:
            with contextlib.suppress(Exception):
                await self._due
