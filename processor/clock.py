"""Time as the host sees it, injected so that tests can skew the wall clock.

Decisions use only `monotonic()`. The wall clock is read for display (checkpoint times) and for
`--start-from-now`; `CFP_TEST_CLOCK_SKEW_S` shifts it, which the integration tests use to show
that a skewed clock changes nothing.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

SKEW_ENV = "CFP_TEST_CLOCK_SKEW_S"


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> datetime: ...


class SystemClock:
    def __init__(self, skew_s: float | None = None) -> None:
        if skew_s is None:
            skew_s = float(os.environ.get(SKEW_ENV, "0") or 0)
        self._skew = timedelta(seconds=skew_s)

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> datetime:
        return datetime.now(UTC) + self._skew
