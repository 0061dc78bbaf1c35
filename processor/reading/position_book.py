"""Every lease's position as this host last saw it: the input of the segment barrier.

Fed by each listing of the lease table (balancer ticks) and by this host's own checkpoints.
Workers waiting at the barrier ask for a fresh listing, at most once per refresh interval for the
whole host, and wake up whenever a position changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

import structlog

from leases import Lease, LeaseError
from processor.changefeed.errors import InvalidContinuation
from processor.clock import Clock, SystemClock
from processor.reading.barrier import has_finished_before, may_enter, readable_segments
from processor.reading.lease_position import LeasePosition
from processor.waiting import wait_any

log = structlog.get_logger("cfp.barrier")


class PositionBook:
    def __init__(
        self,
        lister: Callable[[], Awaitable[list[Lease]]],
        *,
        refresh_s: float,
        clock: Clock | None = None,
    ) -> None:
        self._lister = lister
        self._clock = clock or SystemClock()
        self._refresh_s = refresh_s
        self._positions: dict[str, LeasePosition] = {}
        self._parked: set[str] = set()
        self._changed = asyncio.Event()
        self._lock = asyncio.Lock()
        self._refreshed_at = 0.0

    def update_from(self, leases: Iterable[Lease]) -> None:
        fresh: dict[str, LeasePosition] = {}
        leases = list(leases)
        parked: set[str] = {lease.token for lease in leases if lease.parked}
        if parked != self._parked:
            self._parked = parked
            self._notify()
        for lease in leases:
            try:
                fresh[lease.token] = LeasePosition.from_json(lease.continuation, lease=lease.token)
            except InvalidContinuation as e:
                log.error("lease.continuation_invalid", lease=lease.token, error=str(e))
                fresh[lease.token] = LeasePosition()
        if fresh != self._positions:
            self._positions = fresh
            self._notify()
        self._refreshed_at = self._clock.monotonic()

    def set(self, token: str, position: LeasePosition) -> None:
        if self._positions.get(token) != position:
            self._positions[token] = position
            self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def may_enter(self, segment: str, segments: list[str]) -> bool:
        return may_enter(segment, segments, self._positions.values())

    def is_stalled(self, token: str, segments: list[str]) -> bool:
        """Whether lease `token` waits at the barrier only for parked leases: it can deliver
        nothing more until an operator moves or resumes them."""
        position = self._positions.get(token)
        if position is None or position.scan is not None:
            return False  # a scan partition never waits at the barrier
        if not (position.segment is None or position.is_segment_done):
            return False
        after = position.segment or ""
        following = [s for s in readable_segments(segments, position) if s > after]
        if not following:
            return False
        holding = {
            t
            for t, p in self._positions.items()
            if not has_finished_before(p, following[0], segments)
        }
        return bool(holding) and holding <= self._parked

    async def wait_for_change(self, *, stop: asyncio.Event, timeout_s: float) -> None:
        """Return when a position changes, `stop` is set, or after a fresh listing."""
        if not await wait_any(self._changed, stop, timeout_s=timeout_s):
            await self.refresh()

    async def refresh(self) -> None:
        async with self._lock:
            if self._clock.monotonic() - self._refreshed_at < self._refresh_s:
                return
            try:
                leases = await self._lister()
            except LeaseError as e:  # a failed listing only delays the barrier
                log.warning("barrier.refresh_failed", error=str(e))
                return
            self.update_from(leases)
