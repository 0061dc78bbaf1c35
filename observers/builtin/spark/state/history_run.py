"""One state job run's share of the history: the versions its events close.

The history table holds the closed versions; the open version of each blob is its state row.
The state MERGE of the run records, in the state's change data feed, each row it replaced
(`update_preimage`). For a blob whose new events are all newer than that row, the row is the
version they close, and folding it with the new events gives every version the run closes
with no read of either table: those rows are appended. A blob new to the state (`insert`) has
no version before its new events.

Any other blob takes the general path: a late event (older than the blob's open version), a
rebuild, a run repeated after a crash, tables not in step. Its tail (closed versions and the
open one) is folded again with the new events and the closed rows are MERGEd, which reads the
history; one such blob sends the whole run that way, which stays exact, only slower.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from observers.builtin.spark.commits import is_conflict
from observers.builtin.spark.sql import table_ref
from observers.builtin.spark.state import history
from observers.builtin.spark.state.state_table import blob_events

log = structlog.get_logger("cfp.spark.history")

CLOSED = "WHERE valid_to_sequencer IS NOT NULL"
Write = Callable[[str, bool], list[Any]]
"""Runs a statement as the job's idempotent commit: `write(statement, retry_conflicts)`."""


@dataclass(frozen=True, slots=True)
class HistoryWrite:
    """The history's write: its rows (a MERGE's metrics, none when Delta skipped it as done;
    an append has none either way), and which path it took."""

    rows: list[Any]
    appended: bool  # the fast path (an append), not the MERGE


@dataclass(frozen=True, slots=True)
class Replaced:
    """The state commits (versions `first` to `last`) whose MERGEs replaced rows the history has
    not taken yet: those rows are versions, closed by events of this run."""

    first: int
    last: int
    alone: bool  # only this run's own MERGE, on tables in step: the fast path may be taken


def apply_history(
    session: Any,
    *,
    history_uri: str,
    state_uri: str,
    changes_view: str,
    replaced: Replaced | None,
    state_at: int,
    write: Write,
) -> HistoryWrite:
    """Fold the change-log rows of view `changes_view` into the history, after the state MERGEs
    `replaced` (None: no state row was replaced since the history's version, or the rows are
    the whole change log, which holds the event of every version).

    `state_at`: the state's version whose rows are the open versions (`replaced.last` when
    given). Read as of that version, not as it is now: a commit of another run meanwhile would
    replace rows that neither `replaced` nor the history holds, and the versions they were
    would be lost (seen under the chaos suite's pauses: a version then ends where no version
    begins)."""
    name = uuid.uuid4().hex
    rows, tails = f"cfp_replaced_{name}", f"cfp_tails_{name}"
    every = history.every_version(history_uri, state_uri, state_at)
    try:
        if replaced is not None:
            (
                session.read.format("delta")
                .option("readChangeFeed", "true")
                .option("startingVersion", replaced.first)
                .option("endingVersion", replaced.last)
                .load(state_uri)
                .where("_change_type IN ('update_preimage', 'insert')")
                .createOrReplaceTempView(rows)
            )
            preimages = history.as_versions(
                f"(SELECT * FROM {rows} WHERE _change_type = 'update_preimage')"
            )
            if replaced.alone and not session.sql(_general_blobs(changes_view, rows)).first()["n"]:
                session.sql(preimages).createOrReplaceTempView(tails)
                appended = _append(
                    history_uri, history.tail_folded(tails, changes_view, tails_only=True), write
                )
                if appended is not None:
                    return HistoryWrite(appended, appended=True)
            every = f"{every} UNION ALL {preimages}"
        session.sql(
            f"SELECT * FROM ({history.tail_folded(f'({every})', changes_view)}) {CLOSED}"
        ).createOrReplaceTempView(tails)
        return HistoryWrite(write(history.merge_statement(history_uri, tails), True), False)
    finally:
        for view in (rows, tails):
            session.catalog.dropTempView(view)


def _append(history_uri: str, folded: str, write: Write) -> list[Any] | None:
    """Append the closed versions of `folded`; None when another writer of the history
    committed meanwhile (Delta's conflict on the job's application id): the caller MERGEs."""
    try:
        return write(
            f"INSERT INTO {table_ref(history_uri)} SELECT * FROM ({folded}) {CLOSED}", False
        )
    except Exception as e:
        if not is_conflict(e):
            raise
        log.warning("history.append_conflicted", reason=str(e).splitlines()[0][:300])
        return None


def _general_blobs(changes_view: str, replaced: str) -> str:
    """SQL: how many blobs the rows of `changes_view` touch that the fast path cannot take:
    neither new to the state nor with every new event newer than the row the MERGE replaced."""
    return f"""WITH touched AS (
  SELECT container, blob, min(sequencer) AS since FROM ({blob_events(changes_view)})
  GROUP BY container, blob
)
SELECT count(*) AS n FROM touched t LEFT JOIN {replaced} r
  ON t.container = r.container AND t.blob = r.blob
WHERE r._change_type IS NULL OR (r._change_type = 'update_preimage' AND t.since <= r.sequencer)"""
