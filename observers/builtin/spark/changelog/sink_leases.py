"""The leases a host's Spark sink writes for: where each one's writes stand (its `LeaseFence`),
its fence and floor committed ahead of its first write, whether it is open here (and in which
opening), and whether its last write failed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

import structlog

from observers.builtin.spark.changelog.delta_appends import Writer, fence_ahead, sync_ahead
from observers.builtin.spark.changelog.fence import LeaseFence, app_id
from observers.builtin.spark.changelog.write_queue import Pending
from observers.builtin.spark.session.link import Sessions, SparkLink

log = structlog.get_logger("cfp.spark")


class SinkLeases:
    def __init__(self, changes: Writer, link: SparkLink) -> None:
        self._changes = changes
        self._link = link
        self.fences: dict[str, LeaseFence] = {}  # lease -> where its writes stand
        self.fencing: dict[str, asyncio.Task[None]] = {}  # lease -> its fence, committing
        self.failed: dict[str, BaseException] = {}  # lease -> why its last write failed
        self._open: dict[str, int] = {}  # leases open here -> their opening (counted)
        self._openings = 0

    def opened(self, lease: str, epoch: int, processor: str) -> None:
        """A lease (re)opened here at `epoch`: it reads again from its checkpoint, so an old write
        failure no longer stands in its way, and its next append syncs first (`fence.py`); its
        fence is committed now, unless Spark is away (then once it is back)."""
        self._openings += 1
        self._open[lease] = self._openings
        self.failed.pop(lease, None)
        fence = self.fences.get(lease)
        if fence is None:
            fence = self.fences[lease] = LeaseFence(lease, app_id(processor, lease), epoch)
        else:
            fence.reopened(epoch)
        if self._link.is_up:
            self._fence_ahead(lease, fence)

    def closed(self, lease: str) -> None:
        self._open.pop(lease, None)

    def opening(self, lease: str) -> int:
        """Which opening of the lease its batches now belong to (0: not open here)."""
        return self._open.get(lease, 0)

    def current(self, items: list[Pending], give_up: Callable[[Pending], None]) -> list[Pending]:
        """The batches of leases open here in the opening they were read in; the others are
        given up (`give_up`: their lease's next opening reads them again). A lease never opened
        here is kept, for `append_each` to refuse by name."""
        kept = []
        for item in items:
            if item.opening == 0 or self._open.get(item.lease) == item.opening:
                kept.append(item)
            else:
                give_up(item)
        return kept

    def fail(self, lease: str, error: BaseException) -> None:
        self.failed[lease] = error

    def sync_ahead(self, lease: str, first: str) -> asyncio.Task[None] | None:
        """The lease's floor read (after its fence) from `first` on, started unless synced or
        asked since it last unsynced: its first write then finds it done. The task, if started."""
        fence = self.fences.get(lease)
        if fence is None or lease in self.failed or not self._link.is_up or not fence.ask_sync():
            return None
        before = self.fencing.get(lease)
        ahead = sync_ahead(
            self._changes, self._link, fence, before, at_least=first, generation=fence.generation
        )
        task = self.fencing[lease] = asyncio.create_task(ahead)
        return task

    async def floor(self, lease: str, first: str) -> str | None:
        """The lease's highest position in the change log from `first` on, read after its
        fence (the sync its first write would do, done now): None when there is none, or the
        read failed (its first write then syncs itself, and leaves out what it must)."""
        if (task := self.sync_ahead(lease, first)) is not None:
            await asyncio.wait([task])  # a worker that gives up leaves it to the first write
        fence = self.fences.get(lease)
        if fence is None or lease in self.failed or not fence.synced:
            return None
        return fence.floor if fence.floor_covers(first) else None

    def resync(self, sessions: Sessions) -> None:
        """Spark is back on new sessions: every lease syncs again before its next write (a
        write in flight at the loss may or may not have committed), its fence committed now."""
        for lease, fence in self.fences.items():
            fence.unsync()
            if lease in self._open and lease not in self.failed:
                self._fence_ahead(lease, fence)
        log.info("spark.resync", leases=len(self._open), generation=sessions.generation)

    async def fenced(self, leases: Iterable[str]) -> None:
        """Once the fences and floor reads under way for these leases are done (a write's)."""
        fencing = [self.fencing.pop(lease) for lease in leases if lease in self.fencing]
        if fencing:
            await asyncio.wait(fencing)

    async def settled(self) -> None:
        """Once every fence and floor read under way is done (the sink's exit)."""
        if self.fencing:
            await asyncio.wait(self.fencing.values())

    def _fence_ahead(self, lease: str, fence: LeaseFence) -> None:
        ahead = fence_ahead(self._changes, self._link, fence, self.fencing.get(lease))
        self.fencing[lease] = asyncio.create_task(ahead)


def drop_failed(
    items: list[Pending], failed: Mapping[str, BaseException], give_up: Callable[..., None]
) -> list[Pending]:
    """Fail the batches of leases whose earlier write failed (writing them would let their
    checkpoint pass the lost batch); the others."""
    kept = []
    for item in items:
        error = failed.get(item.lease)
        if error is None:
            kept.append(item)
        else:
            give_up(item, error)
    return kept
