"""One write's appends, one per lease, and the two halves of taking a lease done ahead of its
first write: the fence when the lease opens, the floor read when its first batch comes (taking a
lease costs a commit and a read, so they run while its first batches are read and queued)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import pyarrow as pa
import structlog

from observers.builtin.spark.changelog.change_log import Hold, Written
from observers.builtin.spark.changelog.fence import LeaseFence
from observers.builtin.spark.session.link import Sessions, SparkLink, SparkUnavailable

log = structlog.get_logger("cfp.spark")

SIDE_BY_SIDE = 8  # leases' appends of one write in flight at once


class Writer(Protocol):
    """Commits one lease's rows (blocking); the Spark one is `ChangeLog`."""

    def write(
        self, session: Any, fence: LeaseFence, table: pa.Table, *, hold: Hold | None = None
    ) -> Written: ...

    def fence_ahead(self, session: Any, fence: LeaseFence) -> int: ...

    def sync(
        self, session: Any, fence: LeaseFence, *, at_least: str | None, generation: int | None
    ) -> int: ...


async def fence_ahead(
    writer: Writer, link: SparkLink, fence: LeaseFence, before: asyncio.Task[None] | None
) -> None:
    """The lease's fence, committed while its first batches are read (taking a lease costs a
    commit: not in front of its first write), after the fence of its last open (`before`). A
    failure costs nothing: the first write syncs itself."""

    def fence_it(sessions: Sessions) -> int:
        return writer.fence_ahead(sessions.writer, fence)

    if (took := await _after(before, fence, "fence_ahead", fence_it, link)) is not None:
        log.info("spark.fence_committed", lease=fence.lease, seconds=took)


async def sync_ahead(
    writer: Writer,
    link: SparkLink,
    fence: LeaseFence,
    before: asyncio.Task[None] | None,
    *,
    at_least: str | None,
    generation: int,
) -> None:
    """The lease's floor read from `at_least` on, once its fence (`before`) is in: the other
    half of taking a lease, done while its first write waits for other batches or for Spark.
    A failure costs nothing: the first write syncs itself; nor does a lease that unsynced
    since `generation` (when it was asked for) count it."""

    def sync(sessions: Sessions) -> int:
        return writer.sync(sessions.writer, fence, at_least=at_least, generation=generation)

    took = await _after(before, fence, "sync_ahead", sync, link)
    if took is not None and fence.synced:  # the cost of taking a lease (with the fence's)
        log.info("spark.synced", lease=fence.lease, seconds=took, ahead=True)


async def _after(
    before: asyncio.Task[None] | None,
    fence: LeaseFence,
    what: str,
    call: Callable[[Sessions], int],
    link: SparkLink,
) -> float | None:
    """`call` (blocking, through `link`) once `before` is done: its seconds, or None when it
    failed (logged as `spark.<what>_failed`) or Spark is away (the lease syncs again when it
    is back)."""
    if before is not None:
        await asyncio.wait([before])
    started = time.monotonic()
    try:
        await link.call(call, what=f"lease {fence.lease}'s {what}")
    except SparkUnavailable:
        return None
    except Exception as e:
        log.warning(f"spark.{what}_failed", lease=fence.lease, error=repr(e)[:1000])
        return None
    return round(time.monotonic() - started, 3)


def append_each(
    writer: Writer,
    session: Any,
    fences: dict[str, LeaseFence],
    tables: Mapping[str, pa.Table],
    hold: Hold | None,
) -> dict[str, Written | BaseException]:
    """Each lease's rows appended, side by side (blocking); per lease, what was written or why
    not. `hold` (tests) holds the first lease's append only: one task slot, not the server."""

    def one(lease: str) -> Written | BaseException:
        table = tables[lease]
        if table.num_rows == 0:  # every event was left out (the output's own container)
            return Written(0, 0)
        fence = fences.get(lease)
        if fence is None:  # a batch of a lease never opened here: a bug, never written unfenced
            return RuntimeError(f"lease {lease}: a batch came before the lease was opened")
        try:
            return writer.write(session, fence, table, hold=hold if lease == min(tables) else None)
        except Exception as e:
            return e

    if len(tables) == 1:
        return {lease: one(lease) for lease in tables}
    with ThreadPoolExecutor(min(SIDE_BY_SIDE, len(tables)), "spark-append") as pool:
        return dict(zip(tables, pool.map(one, tables), strict=True))
