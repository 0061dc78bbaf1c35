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
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

PAUSE_AFTER_COMMIT = "CFP_TEST_SPARK_PAUSE_AFTER_COMMIT_S"
HOLD_POLL_S = 0.2
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


def held_until(flag: str) -> Callable[[Any], Any]:
    """A DataFrame's rows held inside Spark until `flag` exists (tests: a write in flight). The
    first of its tasks to run makes `flag`.held (the write's Delta transaction is open by then)
    and waits; the others pass, so that the held write takes one task slot, not the server."""

    def wait_then_pass(batches: Iterator[Any]) -> Iterator[Any]:
        try:
            os.close(os.open(f"{flag}.held", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            yield from batches
            return
        while not os.path.exists(flag):
            time.sleep(HOLD_POLL_S)
        yield from batches

    def hold(frame: Any) -> Any:
        return frame.mapInArrow(wait_then_pass, frame.schema)

    return hold
