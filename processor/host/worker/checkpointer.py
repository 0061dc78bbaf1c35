"""Writing a lease's checkpoints: the ledger decides what may be written, this writes it through
the owner's door (conditional on owner and epoch), and waits out a store that does not answer
for as long as the lease stays usable.

Who checkpoints after a batch is chosen once per observer (`after_batch`): the host, after every
batch the observer accepts (the default, like Cosmos DB's `AutoCheckpointer`), or the observer
itself (`auto_checkpoint = False`) through `ctx.checkpoint(mark)` once its batches are durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from leases import LeaseError, LeaseMove, LeaseTable
from leases.policy.timings import Timings
from observers import CloseReason, LeaseLostError
from processor.clock import Clock
from processor.host.health.lease_recorder import LeaseRecorder
from processor.host.leasing.held_lease import HeldLease
from processor.host.worker.checkpoint_ledger import CheckpointLedger
from processor.host.worker.delivery import check_still_ours
from processor.host.worker.worker_env import WorkerEnded, WorkerEnv
from processor.plugins.observer_calls import ObserverCalls
from processor.reading.lease_position import LeasePosition
from processor.reading.position_book import PositionBook
from processor.waiting import wait_any


@dataclass(frozen=True, slots=True)
class CheckpointWiring:
    """What the checkpointers of a host share: the lease table they write to, the book that
    tells the segment barrier, the clock, the per-lease counters, the timings, and the host's
    stop and caught-up signals."""

    store: LeaseTable
    book: PositionBook
    clock: Clock
    progress: LeaseRecorder
    timings: Timings
    stop: asyncio.Event
    caught_up: asyncio.Event | None


class Checkpointer:
    def __init__(
        self, held: HeldLease, ledger: CheckpointLedger, log: Any, host: CheckpointWiring
    ) -> None:
        self.held, self.ledger, self.log = held, ledger, log
        self._store, self._book, self._clock = host.store, host.book, host.clock
        self._progress, self._timings = host.progress, host.timings
        self._stop, self._caught_up = host.stop, host.caught_up
        self.is_caught_up_recorded = held.lease.caught_up
        self.is_finished_recorded = False  # caught up for good (a done scan, an end time reached)
        self.confirmed = asyncio.Event()  # the observer checkpointed a mark

    async def write(
        self, position: LeasePosition, *, caught_up: bool, gap: LeaseMove | None = None
    ) -> None:
        """Write `position` into the lease. Errors: `WorkerEnded(LEASE_LOST)` when the store
        refuses (another epoch owns it) or stays unreachable until the fencing interval ends."""
        held, store, clock = self.held, self._store, self._clock
        checkpoint = self.ledger.prepare(position)
        text = position.to_json()
        started = clock.monotonic()
        while True:
            if not held.is_usable():
                raise WorkerEnded(CloseReason.LEASE_LOST)
            try:
                result = await held.write(
                    lambda lease: store.checkpoint(
                        lease,
                        text,
                        caught_up=caught_up,
                        when=clock.wall(),
                        dead_letters=checkpoint.dead_letters,
                        delivered=checkpoint.delivered,
                        gap=gap,
                    )
                )
            except LeaseError as e:
                self.log.warning("checkpoint.failed", error=str(e))
                await wait_any(held.lost, timeout_s=self._timings.renew_every_s / 2)
                continue
            if result is None:
                raise WorkerEnded(CloseReason.LEASE_LOST)
            break
        self.ledger.written(checkpoint)
        self._progress.checkpointed(
            held.token, text, caught_up=caught_up, seconds=clock.monotonic() - started
        )
        self.is_caught_up_recorded = caught_up
        self.is_finished_recorded = caught_up and position.is_finished
        self._book.set(held.token, position)
        if caught_up and (signal := self._caught_up) is not None:
            signal.set()

    async def caught_up(self, position: LeasePosition) -> bool:
        """Record "caught up" (and "finished", at an end time or a scan's end) once every batch
        is confirmed; True once the lease is recorded finished."""
        self.confirmed.clear()
        recorded = self.is_caught_up_recorded and (
            self.is_finished_recorded or not position.is_finished
        )
        if self.ledger.all_confirmed():
            if recorded:  # as the lease already said when we took it
                self._progress.caught_up(self.held.token)
            else:
                await self.write(position, caught_up=True)
        return self.is_finished_recorded

    def unconfirmed(self) -> list[asyncio.Event]:
        """What to wait on for an observer still writing: its next confirmation (nothing when
        every batch is confirmed)."""
        return [] if self.ledger.all_confirmed() else [self.confirmed]

    async def all_confirmed(self) -> None:
        """Wait until the observer confirmed every batch delivered. Errors: `WorkerEnded` when
        the host stops or the lease stops being ours meanwhile."""
        held = self.held
        while not self.ledger.all_confirmed():
            check_still_ours(held, self._stop)
            self.confirmed.clear()
            await wait_any(
                self.confirmed,
                self._stop,
                held.lost,
                held.handover,
                timeout_s=self._timings.poll_s,
            )

    async def confirm_delivered(self) -> None:
        """Checkpoint a position reached without a batch (the end of a chunk or segment) once
        every batch before it is confirmed; an observer that buffers confirms later, so this
        is tried again at each step."""
        position = self.ledger.confirmable()
        if position is not None:
            await self.write(position, caught_up=False)

    async def for_observer(self, mark: object | None) -> None:
        """`ctx.checkpoint(mark)`. Errors: `LeaseLostError` when the lease is no longer ours."""
        position = self.ledger.observer_target(mark)
        if position is None:
            return
        try:
            await self.write(position, caught_up=False)
        except WorkerEnded:
            raise LeaseLostError(self.held.token, self.held.epoch) from None
        self.confirmed.set()


def checkpointer_for(
    held: HeldLease, env: WorkerEnv, ledger: CheckpointLedger, log: Any
) -> Checkpointer:
    """The checkpointer of a worker of the host `env` describes."""
    deps, signals = env.deps, env.signals
    host = CheckpointWiring(
        store=deps.store,
        book=deps.book,
        clock=deps.clock,
        progress=deps.progress,
        timings=env.policy.timings,
        stop=signals.stop,
        caught_up=signals.caught_up,
    )
    return Checkpointer(held, ledger, log, host)


def after_batch(
    calls: ObserverCalls, checkpointer: Checkpointer
) -> Callable[[LeasePosition], Awaitable[None]]:
    """What follows a batch the observer accepted, chosen once per observer."""
    if calls.auto_checkpoint:
        return lambda end: checkpointer.write(end, caught_up=False)

    async def the_observer_checkpoints(end: LeasePosition) -> None:
        return None

    return the_observer_checkpoints
