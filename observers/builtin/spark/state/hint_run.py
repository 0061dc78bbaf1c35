"""The state job's second half with hints: the hints appended to `OUTPUT/hints` since its last
run, folded into one candidate per blob and MERGEd into the state table under the sequencer
guard (`state_table.hint_merge_statement`), as an idempotent Delta write of its own (`txnAppId`
`cfp-hints`, `txnVersion` the hints table's version applied, recorded in the commit as
`cfpHintsVersion`). Hints that are gone (VACUUM) are read again from the whole table: the guard
makes any hint applied twice change nothing.

Also counts what hints left unconfirmed: provisional rows, and those older than
`--hints-confirm-within` (a hint the feed should have confirmed by then)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from observers.builtin.spark.sql import table_ref
from observers.builtin.spark.state import state_table
from observers.builtin.spark.state.added_rows import added_rows, recorded_version

log = structlog.get_logger("cfp.spark.state")

HINTS_APP_ID = "cfp-hints"
HINTS_META_KEY = "cfpHintsVersion"
MAX_HINT_VERSIONS = 500  # hints commits applied by one run (one per host per --spark-max-wait)
LOOKBACK = 100  # state commits searched for the hints version applied, before all of them
UNCONFIRMED_EVERY_S = 30.0  # how often a run with hints counts the provisional rows


@dataclass(frozen=True, slots=True)
class HintsKept:
    """The hints table the state job folds in, how long a hint may stay unconfirmed, and how
    often the job's runs (one per `--hints-state-interval`) fold the change log too."""

    table: str
    confirm_within_s: float
    changes_every_s: float = 0.0  # --state-interval (0: every run)


@dataclass(frozen=True, slots=True)
class HintRun:
    applied: int  # the hints table's version the state holds after the run (-1: none)
    latest: int
    inserted: int = 0
    updated: int = 0
    skipped: bool = False  # another run applied this version first


@dataclass(frozen=True, slots=True)
class Unconfirmed:
    provisional: int  # rows whose newest change is a hint the feed has not confirmed
    overdue: int  # of them, those taken longer ago than --hints-confirm-within


def hints_metadata(version: int) -> str:
    return json.dumps({HINTS_META_KEY: version})


def hints_applied(history: list[Any]) -> int | None:
    """The hints version recorded by the newest hints commit among `history` (DESCRIBE
    HISTORY rows, newest first); None when none is."""
    return recorded_version(history, HINTS_META_KEY)


Write = Callable[[int, str], list[Any]]
"""An idempotent write: `(hints version, statement)` -> the statement's rows (none: skipped)."""


class HintFolding:
    def __init__(self, session: Any, *, kept: HintsKept, state_table: str, write: Write) -> None:
        self.session, self.hints_table, self.state_table = session, kept.table, state_table
        self.confirm_within_s = kept.confirm_within_s
        self._write = write
        self._applied: int | None = None
        self._counted_at = -UNCONFIRMED_EVERY_S  # monotonic: the provisional rows' last count

    def forget(self) -> None:
        self._applied = None

    def applied(self) -> int:
        table = table_ref(self.state_table)
        recent = self._sql(f"DESCRIBE HISTORY {table} LIMIT {LOOKBACK}")
        found = hints_applied(recent)
        if found is None and len(recent) >= LOOKBACK:
            found = hints_applied(self._sql(f"DESCRIBE HISTORY {table}"))
        return -1 if found is None else found

    def run(self) -> HintRun:
        """Apply the hints appended since the last run (blocking). Errors: Spark's."""
        applied = self._applied if self._applied is not None else self.applied()
        latest = int(
            self._sql(f"DESCRIBE HISTORY {table_ref(self.hints_table)} LIMIT 1")[0]["version"]
        )
        if applied >= latest:
            self._applied = applied
            return HintRun(applied, latest)
        end = min(latest, applied + MAX_HINT_VERSIONS)
        try:
            run = self._merge(applied, end, latest)
        except Exception:
            self._applied = None
            raise
        self._applied = run.applied
        return run

    def run_or_fail(self) -> tuple[HintRun | None, Exception | None]:
        """`run`, its error returned rather than raised (the state job raises it later)."""
        try:
            return self.run(), None
        except Exception as e:
            return None, e

    def count_if_due(self) -> Unconfirmed | None:
        """`unconfirmed` every `UNCONFIRMED_EVERY_S` (a whole table read), else None."""
        if time.monotonic() - self._counted_at < UNCONFIRMED_EVERY_S:
            return None
        self._counted_at = time.monotonic()
        return self.unconfirmed(self.confirm_within_s)

    def _merge(self, applied: int, end: int, latest: int) -> HintRun:
        rows = added_rows(self.session, self.hints_table, applied, end, whole=applied < 0)
        name = uuid.uuid4().hex
        hints_view, taken_view, source_view = (
            f"cfp_{k}_{name}" for k in ("hints", "taken", "hinted")
        )
        rows.createOrReplaceTempView(hints_view)
        try:
            self.session.sql(state_table.hinted_events(hints_view)).createOrReplaceTempView(
                taken_view
            )
            candidates = state_table.newest_per_blob(
                taken_view, extra=state_table.HINT_CANDIDATE_EXTRA
            )
            self.session.sql(candidates).createOrReplaceTempView(source_view)
            result = self._write(
                end, state_table.hint_merge_statement(self.state_table, source_view)
            )
        finally:
            for view in (source_view, taken_view, hints_view):
                self.session.catalog.dropTempView(view)
        if not result:
            return HintRun(self.applied(), latest, skipped=True)
        row = result[0]
        return HintRun(end, latest, int(row["num_inserted_rows"]), int(row["num_updated_rows"]))

    def unconfirmed(self, older_than_s: float) -> Unconfirmed:
        """The state's provisional rows, and those taken more than `older_than_s` ago."""
        row = self._sql(
            "SELECT count_if(coalesce(provisional, false)) AS provisional, "
            "count_if(coalesce(provisional, false) AND hinted_at < current_timestamp() - "
            f"make_dt_interval(0, 0, 0, {float(older_than_s)})) AS overdue "
            f"FROM {table_ref(self.state_table)}"
        )[0]
        return Unconfirmed(int(row["provisional"]), int(row["overdue"]))

    def _sql(self, statement: str) -> list[Any]:
        return list(self.session.sql(statement).collect())
