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
from typing import Any

from leases import LeaseError, LeaseMove
from observers import CloseReason, LeaseLostError
from processor.host.ownership.held_lease import HeldLease
from processor.host.worker.checkpoint_ledger import CheckpointLedger
from processor.host.worker.delivery import check_still_ours
from processor.host.worker.worker_env import WorkerEnded, WorkerEnv
from processor.plugins.observer_calls import ObserverCalls
from processor.reading.lease_position import LeasePosition
from processor.waiting import wait_any


class Checkpointer:
    def __init__(self, held: HeldLease, env: WorkerEnv, ledger: CheckpointLedger, log: Any) -> None:
        self.held, self.env, self.ledger, self.log = held, env, ledger, log
        self.is_caught_up_recorded = held.lease.caught_up
        self.is_finished_recorded = False  # caught up for good (a done scan, an end time reached)
        self.confirmed = asyncio.Event()  # the observer checkpointed a mark

    async def write(
        self, position: LeasePosition, *, caught_up: bool, gap: LeaseMove | None = None
    ) -> None:
        """Write `position` into the lease. Errors: `WorkerEnded(LEASE_LOST)` when the store
        refuses (another epoch owns it) or stays unreachable until the fencing interval ends."""
        deps, held = self.env.deps, self.held
        checkpoint = self.ledger.prepare(position)
        text = position.to_json()
        started = deps.clock.monotonic()
        while True:
            if not held.is_usable():
                raise WorkerEnded(CloseReason.LEASE_LOST)
            try:
                result = await held.write(
                    lambda lease: deps.store.checkpoint(
                        lease,
                        text,
                        caught_up=caught_up,
                        when=deps.clock.wall(),
                        dead_letters=checkpoint.dead_letters,
                        delivered=checkpoint.delivered,
                        gap=gap,
                    )
                )
            except LeaseError as e:
                self.log.warning("checkpoint.failed", error=str(e))
                await wait_any(held.lost, timeout_s=self.env.policy.timings.renew_every_s / 2)
                continue
            if result is None:
                raise WorkerEnded(CloseReason.LEASE_LOST)
            break
        self.ledger.written(checkpoint)
        deps.progress.checkpointed(
            held.token, text, caught_up=caught_up, seconds=deps.clock.monotonic() - started
        )
        self.is_caught_up_recorded = caught_up
        self.is_finished_recorded = caught_up and position.is_finished
        deps.book.set(held.token, position)
        if caught_up and (signal := self.env.signals.caught_up) is not None:
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
                self.env.deps.progress.caught_up(self.held.token)
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
        held, env = self.held, self.env
        while not self.ledger.all_confirmed():
            check_still_ours(held, env)
            self.confirmed.clear()
            await wait_any(
                self.confirmed,
                env.signals.stop,
                held.lost,
                held.handover,
                timeout_s=env.policy.timings.poll_s,
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


def after_batch(
    calls: ObserverCalls, checkpointer: Checkpointer
) -> Callable[[LeasePosition], Awaitable[None]]:
    """What follows a batch the observer accepted, chosen once per observer."""
    if calls.auto_checkpoint:
        return lambda end: checkpointer.write(end, caught_up=False)

    async def the_observer_checkpoints(end: LeasePosition) -> None:
        return None

    return the_observer_checkpoints
