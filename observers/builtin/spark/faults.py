"""The Spark observer's fault points, for the tests that run real `cfp run` processes: each off
unless its `CFP_TEST_*` variable is set, read once, when a host's sink is made. Never set them
in production.

- `CFP_TEST_SPARK_PAUSE_AFTER_COMMIT_S`: pauses once after the first change-log commit, before its
  checkpoints (the moment a test kills a host).
- `CFP_TEST_SPARK_HOLD_WRITE_FILE`: holds the second write in flight inside Spark (its Delta
  transaction open, its rows not yet written) until this file exists (a zombie's write that
  the next owner's fence overtakes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

PAUSE_AFTER_COMMIT = "CFP_TEST_SPARK_PAUSE_AFTER_COMMIT_S"
HOLD_WRITE_FILE = "CFP_TEST_SPARK_HOLD_WRITE_FILE"


@dataclass(frozen=True, slots=True)
class CommitPauses:
    """Each once: a pause after the first commit, before its checkpoints; the second write held
    in flight (its transaction open, its rows not yet written). 0 or "": none."""

    after_commit_s: float = 0.0
    hold_file: str = ""  # holds the second write inside Spark until this file exists


def commit_pauses() -> CommitPauses:
    pause = os.environ.get(PAUSE_AFTER_COMMIT, "").strip()
    return CommitPauses(
        after_commit_s=float(pause) if pause else 0.0,
        hold_file=os.environ.get(HOLD_WRITE_FILE, "").strip(),
    )
