"""Fault-injection points for the tests that run real `cfp run` processes, in one place: each is
off unless its `CFP_TEST_*` variable is set, and read here only, once, when a host is
assembled; the parts take plain values (a skew, pauses), as any other setting. Never set them
in production.

- `CFP_TEST_CLOCK_SKEW_S`: shifts the host's wall clock by this many seconds (decisions use the
  monotonic clock: the tests show that a skew changes nothing).
- `CFP_TEST_SPARK_PAUSE_AFTER_COMMIT_S`: pauses once after the first change-log commit, before its
  checkpoints (the moment a test kills a host).
- `CFP_TEST_SPARK_PAUSE_BEFORE_COMMIT_S`: pauses once between the second write's DataFrame and its
  commit (the moment a test stops a host).
"""

from __future__ import annotations

import os

from observers.spark.session import CommitPauses

CLOCK_SKEW = "CFP_TEST_CLOCK_SKEW_S"
PAUSE_AFTER_COMMIT = "CFP_TEST_SPARK_PAUSE_AFTER_COMMIT_S"
PAUSE_BEFORE_COMMIT = "CFP_TEST_SPARK_PAUSE_BEFORE_COMMIT_S"


def _seconds(name: str) -> float:
    value = os.environ.get(name, "").strip()
    return float(value) if value else 0.0


def clock_skew_s() -> float:
    return _seconds(CLOCK_SKEW)


def spark_commit_pauses() -> CommitPauses:
    return CommitPauses(
        after_commit_s=_seconds(PAUSE_AFTER_COMMIT), before_commit_s=_seconds(PAUSE_BEFORE_COMMIT)
    )
