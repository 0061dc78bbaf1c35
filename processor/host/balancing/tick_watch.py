"""The host's health as its balancing loop reports it (one `TickReport` per tick): running while
the lease store answers, failed once it has not answered for a whole lease expiry (every lease
is fenced by then), paused while the processor row says so; why the host is idle, for its row;
the parked leases, for `--until-caught-up`'s exit code."""

from __future__ import annotations

import asyncio

from leases import Lease
from processor.clock import Clock
from processor.host.balancing.balancer import TickReport
from processor.host.health.lifecycle import HostState, Lifecycle
from processor.host.health.presence import Presence


class TickWatch:
    def __init__(
        self, lifecycle: Lifecycle, presence: Presence, clock: Clock, *, expiry_s: float
    ) -> None:
        self._lifecycle, self._presence, self._clock = lifecycle, presence, clock
        self._expiry_s = expiry_s
        self.ready = asyncio.Event()  # set after the first tick that went through
        self.parked: tuple[Lease, ...] = ()  # as of the last tick
        self._last_tick_at: float | None = None  # monotonic; the balancing loop is alive
        self._store_ok_at = clock.monotonic()

    def __call__(self, report: TickReport) -> None:
        now = self._clock.monotonic()
        self._last_tick_at = now
        if report.went_through:
            self.ready.set()
        self.parked = report.parked
        self._store_ok_at, failure = store_health(
            now=now,
            ok_at=self._store_ok_at,
            answered_at=report.store_answered_at,
            store_error=report.store_error,
            expiry_s=self._expiry_s,
        )
        self._presence.note = report.idle_because
        if failure is not None:
            self._lifecycle.move(HostState.FAILED, error=failure)
        elif report.store_error is None and self.ready.is_set():
            self._lifecycle.move(HostState.PAUSED if report.paused else HostState.RUNNING)

    def store_silent_s(self) -> float:
        """Seconds since the lease store last answered a balancing tick."""
        return self._clock.monotonic() - self._store_ok_at

    def loop_age_s(self) -> float | None:
        """Seconds since the balancing loop last went round (None: not yet)."""
        at = self._last_tick_at
        return None if at is None else self._clock.monotonic() - at


def store_health(
    *,
    now: float,
    ok_at: float,
    answered_at: float | None,
    store_error: str | None,
    expiry_s: float,
) -> tuple[float, str | None]:
    """After a balancing tick: when the lease store last answered, and why the host has failed
    (None: it has not). The store's answer is its listing's time, not the tick's end: a tick
    that then waited on a failing feed says nothing of the store since. Failed once the store
    has been silent for a whole expiry (every lease is fenced by then)."""
    if store_error is None and answered_at is not None:
        ok_at = max(ok_at, answered_at)
    silent = now - ok_at
    if silent < expiry_s:
        return ok_at, None
    return ok_at, store_error or f"the lease store has not answered for {silent:.1f} s"
