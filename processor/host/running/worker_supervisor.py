"""The workers of one host: one task per owned lease, in one task group.

The balancer hands newly acquired leases to `start`; each worker removes itself when it ends.
`close()` lets the group finish: workers see the host's stop event, finish the batch in hand,
checkpoint, release, and return.

A lease lost while its worker still ends (its observer finishing its writes) may be taken again
by this host: the new worker then waits for the old one, its lease renewed meanwhile, instead of
letting the lease go to a host that would read again everything still being written here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from leases import Lease, LeaseToken
from observers import CloseReason
from processor.clock import Clock
from processor.host.leasing.held_lease import HeldLease

log = structlog.get_logger("cfp.supervisor")

RunWorker = Callable[[HeldLease], Awaitable[CloseReason]]


class WorkerSupervisor:
    def __init__(self, run_worker: RunWorker, *, clock: Clock, fence_after_s: float) -> None:
        self._run_worker = run_worker
        self._clock = clock
        self._fence_after_s = fence_after_s
        self._workers: dict[LeaseToken, HeldLease] = {}  # the newest hold of each lease
        self._tasks: dict[LeaseToken, asyncio.Task[None]] = {}  # ... and the task that runs it
        self._group: asyncio.TaskGroup | None = None
        self._closing = asyncio.Event()
        self.closed_reasons: dict[CloseReason, int] = {}

    def held(self) -> list[HeldLease]:
        return list(self._workers.values())

    def tokens(self) -> set[LeaseToken]:
        """The leases this host works on; one lost whose worker still ends is not among them
        (the balancer may take it again, see `start`)."""
        return {token for token, held in self._workers.items() if not held.is_lost}

    async def run(self) -> None:
        """Run workers until `close()`; returns once every worker has ended."""
        async with asyncio.TaskGroup() as tg:
            self._group = tg
            await self._closing.wait()
        self._group = None

    def close(self) -> None:
        self._closing.set()

    def start(self, lease: Lease) -> bool:
        """Start a worker for a lease just acquired: at once, or once the worker of this host's
        earlier hold of it has ended. False when closing, or when that worker still holds it."""
        if self._group is None or self._closing.is_set():
            return False
        earlier = self._workers.get(lease.token)
        if earlier is not None and not earlier.is_lost:
            return False
        ending = self._tasks.get(lease.token)  # kept and dropped with `earlier`
        held = HeldLease(lease, clock=self._clock, fence_after_s=self._fence_after_s)
        self._workers[lease.token] = held
        task = self._group.create_task(self._run(held, ending), name=f"worker-{lease.token}")
        self._tasks[lease.token] = task
        return True

    async def _run(self, held: HeldLease, after: asyncio.Task[None] | None) -> None:
        try:
            if after is not None:
                log.info("worker.waiting_for_earlier", lease=held.token, epoch=held.epoch)
                await asyncio.wait([after])  # its errors are its own
            reason = await self._run_worker(held)
            self.closed_reasons[reason] = self.closed_reasons.get(reason, 0) + 1
        finally:
            held.lost.set()  # whatever happened, this host no longer works on it
            if self._workers.get(held.token) is held:
                del self._workers[held.token]
                del self._tasks[held.token]
