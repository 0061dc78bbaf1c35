"""Fault-injection points for the tests that run real `cfp run` processes, in one place: each is
off unless its `CFP_TEST_*` variable is set, and read here only, once, when a host is
assembled; the parts take plain values (a skew, pauses), as any other setting. Never set them
in production.

- `CFP_TEST_CLOCK_SKEW_S`: shifts the host's wall clock by this many seconds (decisions use the
  monotonic clock: the tests show that a skew changes nothing).
- `CFP_TEST_SPARK_PAUSE_AFTER_COMMIT_S`: pauses once after the first change-log commit, before its
  checkpoints (the moment a test kills a host).
- `CFP_TEST_SPARK_HOLD_WRITE_FILE`: holds the second write in flight inside Spark (its Delta
  transaction open, its rows not yet written) until this file exists (a zombie's write that
  the next owner's fence overtakes).
"""

from __future__ import annotations

import os

from observers.builtin.spark.session.session import CommitPauses

CLOCK_SKEW = "CFP_TEST_CLOCK_SKEW_S"
PAUSE_AFTER_COMMIT = "CFP_TEST_SPARK_PAUSE_AFTER_COMMIT_S"
HOLD_WRITE_FILE = "CFP_TEST_SPARK_HOLD_WRITE_FILE"


def _seconds(name: str) -> float:
    value = os.environ.get(name, "").strip()
    return float(value) if value else 0.0


def clock_skew_s() -> float:
    return _seconds(CLOCK_SKEW)


def spark_commit_pauses() -> CommitPauses:
    return CommitPauses(
        after_commit_s=_seconds(PAUSE_AFTER_COMMIT),
        hold_file=os.environ.get(HOLD_WRITE_FILE, "").strip(),
    )
