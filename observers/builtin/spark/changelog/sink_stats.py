"""What a host's Spark sink counts and logs of its writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from observers.builtin.spark.changelog.change_log import Written

log = structlog.get_logger("cfp.spark")


@dataclass(slots=True)
class SinkStats:
    writes: int = 0
    rows: int = 0
    appended: int = 0
    skipped: int = 0
    commits: int = 0  # Spark commits tried (fences and retries included)
    syncs: int = 0  # fences committed and floors read
    fenced: int = 0  # appends refused or skipped because a newer writer of the lease stands
    seconds: float = 0.0

    def count(self, written: Sequence[Written], took: float) -> None:
        """One committed write of these leases' appends, logged."""
        rows, appended = sum(w.rows for w in written), sum(w.appended for w in written)
        commits, synced = sum(w.attempts for w in written), sum(w.synced for w in written)
        self.writes += 1
        self.rows += rows
        self.appended += appended
        self.skipped += rows - appended
        self.commits += commits
        self.syncs += synced
        self.seconds += took
        log.info(
            "spark.committed",
            rows=rows,
            appended=appended,
            leases=len(written),
            commits=commits,
            synced=synced,
            seconds=round(took, 3),
            spark_s=round(took, 3),
        )
        if rows > appended:
            log.info("spark.replay_skipped", rows=rows - appended)
