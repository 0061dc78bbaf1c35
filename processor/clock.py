"""Time as the host sees it, injected so that tests can skew the wall clock.

Decisions use only `monotonic()`. The wall clock is read for display (checkpoint times) and for
`--start-from-now`; a skew shifts it (`processor/faults.py`: the integration tests show that a
skewed clock changes nothing).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> datetime: ...


class SystemClock:
    def __init__(self, skew_s: float = 0.0) -> None:
        self._skew = timedelta(seconds=skew_s)

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> datetime:
        return datetime.now(UTC) + self._skew
