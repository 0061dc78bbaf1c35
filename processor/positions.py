"""Every lease's position as this host last saw it: the input of the segment barrier.

Fed by each listing of the lease table (balancer ticks) and by this host's own checkpoints.
Workers waiting at the barrier ask for a fresh listing, at most once per refresh interval for the
whole host, and wake up whenever a position changes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable

import structlog

from leases import Lease, LeaseError
from processor.barrier import may_enter
from processor.changefeed.errors import InvalidContinuation
from processor.lease_position import LeasePosition
from processor.waiting import wait_any

log = structlog.get_logger("cfp.barrier")


class PositionBook:
    def __init__(self, lister: Callable[[], Awaitable[list[Lease]]], *, refresh_s: float) -> None:
        self._lister = lister
        self._refresh_s = refresh_s
        self._positions: dict[str, LeasePosition] = {}
        self._changed = asyncio.Event()
        self._lock = asyncio.Lock()
        self._refreshed_at = 0.0

    def update_from(self, leases: Iterable[Lease]) -> None:
        fresh: dict[str, LeasePosition] = {}
        for lease in leases:
            try:
                fresh[lease.token] = LeasePosition.from_json(lease.continuation, lease=lease.token)
            except InvalidContinuation as e:
                log.error("lease.continuation_invalid", lease=lease.token, error=str(e))
                fresh[lease.token] = LeasePosition()
        if fresh != self._positions:
            self._positions = fresh
            self._notify()
        self._refreshed_at = time.monotonic()

    def set(self, token: str, position: LeasePosition) -> None:
        if self._positions.get(token) != position:
            self._positions[token] = position
            self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def may_enter(self, segment: str, segments: list[str]) -> bool:
        return may_enter(segment, segments, self._positions.values())

    async def wait_for_change(self, *, stop: asyncio.Event, timeout_s: float) -> None:
        """Return when a position changes, `stop` is set, or after a fresh listing."""
        if not await wait_any(self._changed, stop, timeout_s=timeout_s):
            await self.refresh()

    async def refresh(self) -> None:
        async with self._lock:
            if time.monotonic() - self._refreshed_at < self._refresh_s:
                return
            try:
                leases = await self._lister()
            except LeaseError as e:  # a failed listing only delays the barrier
                log.warning("barrier.refresh_failed", error=str(e))
                return
            self.update_from(leases)
