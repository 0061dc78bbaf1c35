"""Renewing every lease this host holds, at a fixed rate.

Driven by the host, every `renew_every_s` (fixed rate: a slow round does not push the next one
back). A refused renewal marks the lease lost; a renewal the store could not answer leaves it
held until the fencing interval runs out, after which the worker stops on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

import structlog

from leases import LeaseError, LeaseStore
from processor.clock import Clock
from processor.host.owner_writes import HeldLease
from processor.waiting import wait_any

log = structlog.get_logger("cfp.renewer")


class Renewer:
    def __init__(
        self,
        store: LeaseStore,
        held: Callable[[], Collection[HeldLease]],
        *,
        every_s: float,
        clock: Clock,
    ) -> None:
        self._store = store
        self._held = held
        self._every_s = every_s
        self._clock = clock

    async def run(self, stop: asyncio.Event) -> None:
        next_at = self._clock.monotonic() + self._every_s
        while not await wait_any(stop, timeout_s=next_at - self._clock.monotonic()):
            next_at = max(next_at + self._every_s, self._clock.monotonic())
            await self.renew_all()

    async def renew_all(self) -> None:
        async with asyncio.TaskGroup() as tg:
            for held in list(self._held()):
                if not held.is_lost:
                    tg.create_task(self._renew(held))

    async def _renew(self, held: HeldLease) -> None:
        try:
            if await held.renew(self._store) is None:
                log.warning("lease.lost", lease=held.token, epoch=held.epoch, by="renew")
        except LeaseError as e:
            fenced = not held.is_usable()
            log.warning("lease.renew_failed", lease=held.token, error=str(e), fenced=fenced)
