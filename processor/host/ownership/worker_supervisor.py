"""The workers of one host: one task per owned lease, in one task group.

The balancer hands newly acquired leases to `start`; each worker removes itself when it ends.
`close()` lets the group finish: workers see the host's stop event, finish the batch in hand,
checkpoint, release, and return.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from leases import Lease, LeaseToken
from observers import CloseReason
from processor.clock import Clock
from processor.host.ownership.held_lease import HeldLease

log = structlog.get_logger("cfp.supervisor")

RunWorker = Callable[[HeldLease], Awaitable[CloseReason]]


class WorkerSupervisor:
    def __init__(self, run_worker: RunWorker, *, clock: Clock, fence_after_s: float) -> None:
        self._run_worker = run_worker
        self._clock = clock
        self._fence_after_s = fence_after_s
        self._workers: dict[LeaseToken, HeldLease] = {}
        self._group: asyncio.TaskGroup | None = None
        self._closing = asyncio.Event()
        self.closed_reasons: dict[CloseReason, int] = {}

    def held(self) -> list[HeldLease]:
        return list(self._workers.values())

    def tokens(self) -> set[LeaseToken]:
        return set(self._workers)

    async def run(self) -> None:
        """Run workers until `close()`; returns once every worker has ended."""
        async with asyncio.TaskGroup() as tg:
            self._group = tg
            await self._closing.wait()
        self._group = None

    def close(self) -> None:
        self._closing.set()

    def start(self, lease: Lease) -> bool:
        """Start a worker for a lease just acquired (False when closing or already running)."""
        if self._group is None or self._closing.is_set() or lease.token in self._workers:
            return False
        held = HeldLease(lease, clock=self._clock, fence_after_s=self._fence_after_s)
        self._workers[lease.token] = held
        self._group.create_task(self._run(held), name=f"worker-{lease.token}")
        return True

    async def _run(self, held: HeldLease) -> None:
        try:
            reason = await self._run_worker(held)
            self.closed_reasons[reason] = self.closed_reasons.get(reason, 0) + 1
        finally:
            held.lost.set()  # whatever happened, this host no longer works on it
            if self._workers.get(held.token) is held:
                del self._workers[held.token]
