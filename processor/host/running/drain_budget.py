"""How long a host told to stop still waits for its observers and jobs (`--drain-timeout`).

A stopping host waits for each observer's `close` (the Spark observer's writes in flight), the
state job's last run and the observer factory's exit. On a busy Spark that can outlast the grace
period an orchestrator gives before SIGKILL, and a killed host releases nothing: its leases
wait out their expiry. So the wait has a budget, counted from the stop signal. What runs out
of it is left behind (logged), the leases are released with their last checkpoint, and the
process exits: the next owner reads again from that checkpoint (and an observer that knows what
it holds, like the Spark one, is not given again what did commit meanwhile).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class DrainBudget:
    """The deadline of one host's drain, set once when a stop signal comes (`begin`); until
    then, waits are not bounded. `cut` records that something was left behind."""

    def __init__(self, seconds: float, clock: Callable[[], float]) -> None:
        self.seconds = seconds
        self._clock = clock
        self._until: float | None = None
        self.cut: list[str] = []  # what was left behind, for the host's last log line

    def begin(self) -> None:
        if self._until is None:
            self._until = self._clock() + self.seconds

    def left_s(self) -> float | None:
        """Seconds left (None: no drain under way, no bound)."""
        return None if self._until is None else max(0.0, self._until - self._clock())

    async def within(self, what: str, waited: Awaitable[T]) -> T | None:
        """`waited`'s result, or None when the budget ran out first (then `what` counts as
        left behind, and `waited` is cancelled)."""
        if self.left_s() == 0:  # spent already: not even begun
            if asyncio.iscoroutine(waited):
                waited.close()
            elif isinstance(waited, asyncio.Future):
                waited.cancel()
            self.cut.append(what)
            return None
        try:
            async with asyncio.timeout(self.left_s()):
                return await waited
        except TimeoutError:
            self.cut.append(what)
            return None
