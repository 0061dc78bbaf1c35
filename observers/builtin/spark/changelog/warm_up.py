"""Made-up writes that warm a fresh JVM up before its first real one (`--spark-warm-up-rows`;
the class archive's training run too)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from observers.builtin.spark.changelog.change_log import ChangeLog
from observers.builtin.spark.changelog.fence import LeaseFence
from observers.builtin.spark.changelog.made_up_records import made_up_changes
from observers.builtin.spark.session.output import Output, parse_output
from observers.builtin.spark.tables import create_tables

WARM_UP_WRITES = 3


def warm_up(
    session: Any,
    rows: int,
    *,
    is_closed: Callable[[], bool],
    into: Output | None = None,
    writes: int = WARM_UP_WRITES,
) -> None:
    """Writes of made-up rows into a scratch table before the first real write: a fresh JVM runs
    its first writes several times slower than later ones (classes loaded, code compiled).
    Measured on 2 cores: the first real 50,000-row write took 2.6 s after two writes of 4,000
    rows and 1.6 s after three of 20,000, against 0.95 s warm and 7-8 s cold; the warm-up
    itself took 13-17 s, hence off by default. Only for an embedded session: a Spark Connect
    server is shared, and warm already. A host stopped meanwhile waits for one write at most.
    `into`: tables to keep (the class archive's training run), else a scratch folder."""
    half = rows // 2 or 1
    folder = None if into is not None else Path(tempfile.mkdtemp(prefix="cfp-warm-up-"))
    try:
        scratch = into or parse_output(str(folder))
        create_tables(session, scratch)
        writer = ChangeLog(scratch.changes)
        fences = {lease: LeaseFence(lease, f"warm-up/{lease}", 1) for lease in "ab"}
        for n in range(writes):  # new positions each time: every write appends
            if is_closed():
                return
            for lease, fence in fences.items():
                writer.write(session, fence, made_up_changes(half, shard=lease, start=n * half))
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
