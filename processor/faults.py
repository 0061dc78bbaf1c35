"""The host's fault-injection points, for the tests that run real `cfp run` processes: each is
off unless its `CFP_TEST_*` variable is set, and read here only, once, when a host is
assembled; the parts take plain values (a skew), as any other setting. Never set them in
production.

- `CFP_TEST_CLOCK_SKEW_S`: shifts the host's wall clock by this many seconds (decisions use the
  monotonic clock: the tests show that a skew changes nothing).

The Spark observer's own (its commit pauses) are in `observers/builtin/spark/faults.py`.
"""

from __future__ import annotations

import os

CLOCK_SKEW = "CFP_TEST_CLOCK_SKEW_S"


def _seconds(name: str) -> float:
    value = os.environ.get(name, "").strip()
    return float(value) if value else 0.0


def clock_skew_s() -> float:
    return _seconds(CLOCK_SKEW)
