"""The batches waiting for the Spark sink's next write, and when that write is due.

A Spark job costs a fixed overhead, so the host's leases share writes: while Spark is busy with
one write, batches queue for the next (up to `max_rows` rows or `max_bytes`); an idle Spark gets
what is pending once `min_rows` rows are there or the oldest batch has waited `max_wait_s`.
Submitters wait while twice a write's worth is pending (back-pressure on the readers). While
Spark cannot be reached no write is taken: the sink then lets a lease queue at most a write's
worth (`has_room_while_away`), and puts a write that failed with it back in front (`put_back`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from observers.builtin.spark.session.session import SparkOptions


@dataclass(slots=True)
class Pending:
    """One lease's batch: its rows, its checkpoint, and the future its worker waits on."""

    lease: str
    table: pa.Table
    on_commit: Callable[[], Awaitable[None]]
    opening: int = 0  # which opening of the lease on this host it was read in
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class WriteQueue:
    """The pending batches of a host's leases, oldest first, with their rows and bytes.

    Lease workers `put` batches; the sink's one writer task waits in `wait_for_write`, then
    `take_write`s the oldest batches up to a write's worth. `close` lets the writer drain what is
    left without waiting for more.
    """

    def __init__(self, options: SparkOptions) -> None:
        self._options = options
        self._pending: list[Pending] = []
        self._rows = 0
        self._bytes = 0
        self._first_at = 0.0  # when the oldest pending batch came (or the last write left it)
        self._wake = asyncio.Event()
        self._room = asyncio.Condition()
        self._is_closed = False

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    @property
    def is_closed(self) -> bool:
        return self._is_closed

    def close(self) -> None:
        """No more waiting for batches to share a write: what is pending is due now."""
        self._is_closed = True
        self._wake.set()

    async def put(self, item: Pending, *, unless: asyncio.Event | None = None) -> bool:
        """Queue one batch once there is room for it; False (not queued) when `unless` is set
        first."""
        async with self._room:
            await self._room.wait_for(lambda: self._has_room() or bool(unless and unless.is_set()))
        if unless is not None and unless.is_set() and not self._has_room():
            return False
        self.put_now(item)
        return True

    def put_now(self, item: Pending) -> None:
        """Queue one batch whatever is pending (the caller bounds it)."""
        if not self._pending:
            self._first_at = time.monotonic()
        self._pending.append(item)
        self._count(item, 1)
        self._wake.set()

    def put_back(self, items: list[Pending]) -> None:
        """Batches of a write that did not happen, in front again, in their order."""
        if not items:
            return
        self._pending[:0] = items
        for item in items:
            self._count(item, 1)
        self._first_at = time.monotonic()
        self._wake.set()

    async def take_lease(self, lease: str) -> list[Pending]:
        """Remove and return a lease's pending batches (a lease let go of while Spark is away)."""
        taken = [i for i in self._pending if i.lease == lease]
        if taken:
            self._pending = [i for i in self._pending if i.lease != lease]
            for item in taken:
                self._count(item, -1)
            async with self._room:
                self._room.notify_all()
        return taken

    async def take_all(self) -> list[Pending]:
        """Remove and return every pending batch (the sink closing while Spark is away)."""
        taken, self._pending = self._pending, []
        self._rows = self._bytes = 0
        async with self._room:
            self._room.notify_all()
        return taken

    async def wake_submitters(self) -> None:
        """Submitters waiting for room look again (at what `unless` says: Spark went away)."""
        async with self._room:
            self._room.notify_all()

    def has_room_while_away(self, item: Pending) -> bool:
        """Whether `item` may queue while Spark is away: its lease's batches stay within a write's
        worth and the queue's within twice that, with it (an empty one takes any batch). What
        was queued and in flight at the loss stays; nothing is added past it."""
        o = self._options
        mine = [i for i in self._pending if i.lease == item.lease]
        rows = sum(i.table.num_rows for i in mine) + item.table.num_rows
        size = sum(i.table.nbytes for i in mine) + item.table.nbytes
        if mine and (rows > o.max_rows or size > o.max_bytes):
            return False
        total_rows, total_bytes = self._rows + item.table.num_rows, self._bytes + item.table.nbytes
        fits = total_rows <= 2 * o.max_rows and total_bytes <= 2 * o.max_bytes
        return fits or not self._pending

    def lowest(self, lease: str, table: pa.Table) -> str:
        """The lowest position of `table` and of the lease's pending batches: where a floor read
        ahead of their write must start (Spark back, the lease's queue waiting)."""
        tables = [i.table for i in self._pending if i.lease == lease and i.table.num_rows]
        return min(str(pc.min(t["position"]).as_py()) for t in [table, *tables])

    @property
    def pending(self) -> list[Pending]:
        return list(self._pending)

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def nbytes(self) -> int:
        return self._bytes

    def _count(self, item: Pending, sign: int) -> None:
        self._rows += sign * item.table.num_rows
        self._bytes += sign * item.table.nbytes

    async def wait_for_write(self) -> None:
        """Return once something happened (a batch came, the queue closed, a write left some
        behind); when batches are pending, not before a write is due (full, or the oldest has
        waited `max_wait_s`) or the queue closed. The caller checks `has_pending`."""
        await self._wake.wait()
        self._wake.clear()
        if not self._pending or self._is_closed:
            return
        due = self._first_at + self._options.max_wait_s - time.monotonic()
        if self._is_full() or due <= 0:
            return
        try:
            async with asyncio.timeout(due):
                while not self._is_full() and not self._is_closed:
                    await self._wake.wait()
                    self._wake.clear()
        except TimeoutError:
            pass

    async def take_write(self) -> tuple[list[Pending], int, int]:
        """The oldest pending batches, up to a write's worth (at least one), with their rows and
        bytes; the waiting submitters get the room they left."""
        o, rows, size, n = self._options, 0, 0, 0
        for item in self._pending:
            if n and (
                rows + item.table.num_rows > o.max_rows or size + item.table.nbytes > o.max_bytes
            ):
                break
            rows, size, n = rows + item.table.num_rows, size + item.table.nbytes, n + 1
        items, self._pending = self._pending[:n], self._pending[n:]
        self._rows -= rows
        self._bytes -= size
        if self._pending:
            self._first_at = time.monotonic()
            self._wake.set()  # the rest is due as soon as this write is done
        async with self._room:
            self._room.notify_all()
        return items, rows, size

    def _has_room(self) -> bool:
        o = self._options
        return self._rows < 2 * o.max_rows and self._bytes < 2 * o.max_bytes

    def _is_full(self) -> bool:
        """Worth a write now: a write's worth is pending, or enough to keep an idle Spark busy
        (the writer only asks between writes; rows that came during a write are many)."""
        o = self._options
        return self._rows >= min(o.min_rows, o.max_rows) or self._bytes >= o.max_bytes
