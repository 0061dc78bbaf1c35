"""The change log: each event exactly once for any Delta reader, by fenced blind appends.

An event's key is its lease (`shard`) and its `position` in the lease's feed (the same for every
reader, strictly increasing along a lease). A lease's write is one Delta append of its rows with
the writer options `txnAppId` (the lease's app id) and `txnVersion` (its epoch and sequence:
`fence.py`). Before its first write at an epoch, and after any write that failed, the owner
syncs: it commits an empty write (the fence), then reads the lease's highest position in the
table (the floor) and leaves out what is at or below it. A write of an older owner (a zombie)
then either landed before the fence (and the floor covers it), or fails with
`ConcurrentTransactionException` (the fence landed while it was in flight), or is skipped by
Delta (its version is below the fence). Hence:

- a batch replayed after a crash (the checkpoint lags the change log) is left out up to the
  floor, however it is cut into writes;
- a paused host that wakes up adds nothing, and says so (`LeaseFenced`);
- appends of different leases never conflict (different app ids, no files read).

Delta skips a write whose version is not above the table's in silence, so the first write after
a sync is looked for in the table (`check`): not there means a newer fence stands (a newer owner,
or a lease table made anew beside an old change log), and the lease is fenced. The checkpoint of
a batch moves only after the commit that holds it, so nothing is skipped.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from observers.builtin.spark.arrow_to_spark import to_frame
from observers.builtin.spark.changelog.fence import LeaseFence, above
from observers.builtin.spark.commits import conflict_retrying, is_transaction_conflict
from observers.builtin.spark.sql import sql_string, table_ref
from observers.builtin.spark.tables import columns_ddl
from observers.changes import CHANGES_SCHEMA


class LeaseFenced(Exception):
    """A newer writer of this lease's app id stands in the change log: this host's writes of the
    lease are refused or skipped by Delta. The lease has a newer owner, or the lease table was
    made anew beside an older change log."""

    def __init__(self, lease: str, epoch: int, version: int, why: str) -> None:
        super().__init__(f"lease {lease} at epoch {epoch}: write {version} fenced: {why}")
        self.lease, self.epoch, self.version = lease, epoch, version


@dataclass(frozen=True, slots=True)
class Written:
    """One lease's write: the rows handed, of them those appended, and how it went."""

    rows: int
    appended: int
    attempts: int = 0  # Spark commits tried (fence included)
    synced: bool = False  # a fence and a floor read came first
    version: int = -1  # the write's txnVersion (-1: nothing appended)
    sync_s: float = 0.0  # seconds of the fence and the floor read, when it synced

    @property
    def skipped(self) -> int:
        """Rows at or below the floor: in the change log already (a replay, a zombie's)."""
        return self.rows - self.appended


# the fence's rows: none, of the change log's columns (neither an embedded session nor Spark
# Connect makes a DataFrame of an empty Arrow table)
EMPTY_DDL = columns_ddl(CHANGES_SCHEMA)

# tests only: wraps a write's DataFrame (a write held in flight between its start and commit)
Hold = Callable[[Any], Any]


def commit_note(kind: str, fence: LeaseFence, version: int) -> str:
    """The commit's `userMetadata`: what it was (`fence` or `write`), of which lease and epoch
    (`DESCRIBE HISTORY` tells a lease's commits apart; a skipped write has none)."""
    return json.dumps(
        {"cfp": kind, "lease": fence.lease, "epoch": fence.epoch, "txnVersion": version},
        separators=(",", ":"),
    )


class ChangeLog:
    """Fenced writes into `table_uri`; one lease's writes one at a time, leases side by side."""

    def __init__(self, table_uri: str) -> None:
        self.table_uri = table_uri

    def write(
        self, session: Any, fence: LeaseFence, table: pa.Table, *, hold: Hold | None = None
    ) -> Written:
        """Append the rows of `table` (one lease's, in position order) above the lease's floor,
        syncing first when needed (blocking). Errors: `LeaseFenced`; Spark's, after which the
        lease must sync again (`fence.unsync`, done here) since the outcome is unknown."""
        if table.num_rows == 0:  # every event was left out (the output's own container)
            return Written(0, 0)
        attempts, sync_s = 0, 0.0
        first = pc.min(table["position"]).as_py()
        synced = not fence.synced or not fence.floor_covers(first)
        try:
            if synced:
                started = time.monotonic()
                attempts += self.sync(session, fence, at_least=first)
                sync_s = time.monotonic() - started
            rows = above(table, fence.floor)
            if rows.num_rows == 0:
                return Written(table.num_rows, 0, attempts, synced, sync_s=sync_s)
            version = fence.next_version()
            frame = to_frame(session, rows)  # the one hand-over of this commit
            if hold is not None:
                frame = hold(frame)
            attempts += self._append(frame, fence, version, "write")
            last = pc.max(rows["position"]).as_py()
            if not fence.checked:
                self.check(session, fence, version, last)
            fence.raise_floor(last)
            return Written(table.num_rows, rows.num_rows, attempts, synced, version, sync_s)
        except BaseException:
            fence.unsync()
            raise

    def sync(
        self,
        session: Any,
        fence: LeaseFence,
        *,
        at_least: str | None,
        generation: int | None = None,
    ) -> int:
        """Commit the lease's fence at its next version unless done already (`fence_ahead`),
        then read its floor from a snapshot taken after it (positions from `at_least` on:
        Delta's file statistics skip the rest). Returns the commits tried. A sync ahead of the
        lease's first write (`generation`: when it was asked for) that the lease outlived (it
        unsynced since) leaves it unsynced."""
        attempts = 0 if fence.fenced else self.fence_ahead(session, fence)
        floor = self.max_position(session, fence.lease, at_least)
        fence.synced_at(floor, generation, since=at_least)
        return attempts

    def fence_ahead(self, session: Any, fence: LeaseFence) -> int:
        """Commit the lease's fence at its next version (blocking): when the lease opens, so
        that its first write finds it done. Returns the commits tried."""
        generation = fence.generation
        version = fence.next_version()
        empty = session.createDataFrame([], EMPTY_DDL)
        attempts = self._append(empty, fence, version, "fence")
        fence.fenced_in(generation)
        return attempts

    def check(self, session: Any, fence: LeaseFence, version: int, last: str) -> None:
        """The first write after a sync is in the table, or a newer fence made Delta skip it."""
        if self.max_position(session, fence.lease, last) != last:
            raise LeaseFenced(
                fence.lease,
                fence.epoch,
                version,
                f"Delta skipped it: the change log records a higher version for app id "
                f"{fence.app_id} (a newer owner's fence, or the lease table was made anew "
                "beside an older change log)",
            )
        fence.checked = True

    def max_position(self, session: Any, lease: str, at_least: str | None) -> str | None:
        """The lease's highest position in the change log (from `at_least` on), or None."""
        where = f"shard = {sql_string(lease)}"
        if at_least is not None:
            where += f" AND position >= {sql_string(at_least)}"
        found = session.sql(
            f"SELECT max(position) AS top FROM {table_ref(self.table_uri)} WHERE {where}"
        ).collect()
        top = found[0]["top"] if found else None
        return None if top is None else str(top)

    def _append(self, frame: Any, fence: LeaseFence, version: int, kind: str) -> int:
        """One commit with the lease's transaction id, run again with the same version on a
        conflict (it cannot apply twice); but a write that another writer of the app id
        overtook is fenced. (A fence overtaken by a zombie's write is run again: the floor read
        after it sees the zombie's rows.)"""
        attempts = 0
        writer = (
            frame.write.format("delta")
            .mode("append")
            .option("txnAppId", fence.app_id)
            .option("txnVersion", str(version))
            .option("userMetadata", commit_note(kind, fence, version))
        )
        try:
            for attempt in conflict_retrying(fenced=kind == "write"):
                with attempt:
                    attempts += 1
                    writer.save(self.table_uri)
        except Exception as e:
            if is_transaction_conflict(e) and kind == "write":
                raise LeaseFenced(
                    fence.lease,
                    fence.epoch,
                    version,
                    f"another writer set app id {fence.app_id} while it was in flight (a newer "
                    "owner's fence)",
                ) from e
            raise
        return attempts
