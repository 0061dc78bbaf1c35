"""Renewing every lease this host holds, at a fixed rate.

Driven by the host, every `renew_every_s` (fixed rate: a slow round does not push the next one
back). A refused renewal marks the lease lost; a renewal the store could not answer leaves it
held until the fencing interval runs out, after which the worker stops on its own. Each renewal
also writes the lease's recent read rate (`read_rate.py`), which `--balance-by load` weighs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

import structlog

from leases import LeaseError, LeaseTable, LeaseToken
from processor.clock import Clock
from processor.host.leasing.held_lease import HeldLease
from processor.host.leasing.read_rate import WINDOW_RENEWALS, ReadRate
from processor.waiting import wait_any

log = structlog.get_logger("cfp.renewer")


class Renewer:
    def __init__(
        self,
        store: LeaseTable,
        held: Callable[[], Collection[HeldLease]],
        *,
        every_s: float,
        clock: Clock,
        bytes_read: Callable[[LeaseToken], int | None] = lambda token: None,
    ) -> None:
        self._store = store
        self._held = held
        self._every_s = every_s
        self._clock = clock
        self._bytes_read = bytes_read  # a held lease's bytes read so far (None: unknown)
        self._rates: dict[tuple[LeaseToken, int], ReadRate] = {}  # by lease and epoch

    async def run(self, stop: asyncio.Event) -> None:
        next_at = self._clock.monotonic() + self._every_s
        while not await wait_any(stop, timeout_s=next_at - self._clock.monotonic()):
            next_at = max(next_at + self._every_s, self._clock.monotonic())
            await self.renew_all()

    async def renew_all(self) -> None:
        held_now = [h for h in self._held() if not h.is_lost]
        keys = {(h.token, h.epoch) for h in held_now}
        self._rates = {k: r for k, r in self._rates.items() if k in keys}
        async with asyncio.TaskGroup() as tg:
            for held in held_now:
                tg.create_task(self._renew(held, self._load(held)))

    def _load(self, held: HeldLease) -> float | None:
        total = self._bytes_read(held.token)
        if total is None:
            return None
        rate = self._rates.setdefault((held.token, held.epoch), ReadRate(held.lease.load))
        window_s = WINDOW_RENEWALS * self._every_s
        return round(rate.sample(total, self._clock.monotonic(), window_s=window_s), 1)

    async def _renew(self, held: HeldLease, load: float | None) -> None:
        try:
            if await held.renew(self._store, load=load) is None:
                log.warning("lease.lost", lease=held.token, epoch=held.epoch, by="renew")
        except LeaseError as e:
            fenced = not held.is_usable()
            log.warning("lease.renew_failed", lease=held.token, error=str(e), fenced=fenced)
