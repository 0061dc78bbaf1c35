"""The state job: brings the current-state table up to the change log, one MERGE per run.

One host of the processor runs it at a time (the host holding its lease,
`processor.host.running.job_runner`), every `--state-interval` seconds. A run:

1. reads which change-log version the state table has applied: the `userMetadata` of the last
   state commit made by this job (`applied`), and the change log's newest version (`latest`);
2. reads the rows the change-log commits after `applied` added (Delta's change data feed), at
   most `MAX_VERSIONS` commits per run, or every row of the change log when nothing is applied
   yet or those commits are gone (VACUUM, log retention: the state is whole, which the
   sequencer guard makes safe);
3. folds them into one row per blob and MERGEs them into the state table, as an idempotent
   Delta write: `txnAppId` `cfp-state` with `txnVersion` = the change-log version applied,
   recorded in the same commit. Delta skips a write whose version is not above the last one
   recorded, so a run repeated after a crash, or by a paused host that wakes up late, changes
   nothing;
4. takes the same rows into the history table as `cfp-history` (`history_run.py`: appends the
   versions they close, or folds the touched blobs' tails again and MERGEs them). Each table
   records the version it applied; a run starts after the older of the two, which both allow:
   applying an event again changes neither table.

With hints (`cfp run --hints-queue`), a run first folds the hints appended since the last one
into the state (`hint_run.py`), and folds the change log only every `HintsKept.changes_every_s`
(`--state-interval`) or in a final run: a hint's way to the state waits for no MERGE of the
feed's, which the feed's minutes of delay would not notice; now and then a run also counts the
rows hints left provisional (`HintFolding.count_if_due`). Every `optimize_every_s` it compacts
the small files of the tables (`OPTIMIZE`).
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from observers.builtin.spark.commits import conflict_retrying
from observers.builtin.spark.sql import table_ref
from observers.builtin.spark.state import state_table
from observers.builtin.spark.state.added_rows import added_rows, recorded_version
from observers.builtin.spark.state.hint_run import (
    HINTS_APP_ID,
    HintFolding,
    HintRun,
    HintsKept,
    Unconfirmed,
    hints_metadata,
)
from observers.builtin.spark.state.history_run import Replaced, apply_history
from observers.builtin.spark.tables import keep_closed_versions_only

log = structlog.get_logger("cfp.spark.state")

APP_ID = "cfp-state"
HISTORY_APP_ID = "cfp-history"
MAX_VERSIONS = 200  # change-log commits applied by one run (each holds up to a Spark write)
HISTORY_LOOKBACK = 100  # state commits searched for the version applied, before all of them
META_KEY = "cfpChangesVersion"
JOB_CONF = {
    # MERGE reads its source twice (the rows it touches, then the rows it writes), and this
    # source is a fold of change-log rows, not an Arrow table: computing it once (Delta's
    # default, which the change log's session turns off) ran 20% faster at 10M blobs
    "spark.databricks.delta.merge.materializeSource": "auto",
    # that source (~150 bytes a blob) is broadcast up to this size rather than joined by
    # shuffling the whole state table: 500,000 changes into 10M blobs took 46 s, not 61 s
    "spark.sql.autoBroadcastJoinThreshold": str(128 * 1024 * 1024),
}
"""Settings of the state job's own session, on top of the tables' (`session.SQL_CONF`)."""
# what Spark says when the commits asked for are gone: rebuild from the whole change log instead
GONE = (
    "FileNotFound",
    "VersionNotFound",
    "DELTA_CHANGE_DATA_FILE_NOT_FOUND",
    "DELTA_FILE_NOT_FOUND",
    "DELTA_VERSION_NOT_CONTIGUOUS",
    "DELTA_MISSING_CHANGE_DATA",
    "CDF_NOT_ENABLED",
    "DELTA_CHANGE_TABLE_FEED_DISABLED",
    "No such file",
    "does not exist",
)


@dataclass(frozen=True, slots=True)
class StateRun:
    """What one run did (logged, and its `applied` kept in the job's lease)."""

    applied: int  # change-log version the state table holds after the run (-1: none)
    latest: int  # the change log's newest version seen
    inserted: int = 0  # blobs new to the table
    updated: int = 0  # blobs changed
    skipped: bool = False  # another run applied this version first (Delta skipped the write)
    whole: bool = False  # read the whole change log (the first run, or new commits were gone)
    optimized: bool = False
    history: str = ""  # how the history took the run: appended, merged ("": not kept, skipped)
    seconds: float = 0.0
    hints: HintRun | None = None  # with hints: what the run took of them
    unconfirmed: Unconfirmed | None = None  # with hints, when counted: what they left

    @property
    def is_caught_up(self) -> bool:
        return self.applied >= self.latest


def commit_metadata(version: int) -> str:
    return json.dumps({META_KEY: version})


def applied_version(history: list[Any]) -> int | None:
    """The change-log version recorded by the newest commit of this job in `history` (rows of
    DESCRIBE HISTORY, newest first); None when none of them is ours."""
    return recorded_version(history, META_KEY)


def _commits_of(history: list[Any]) -> list[tuple[int, int]]:
    """(table version, change-log version applied) of this job's commits among `history`
    (rows of DESCRIBE HISTORY)."""
    out = []
    for row in history:
        applied = applied_version([row])
        if applied is not None:
            out.append((int(row["version"]), applied))
    return out


def newest_version(session: Any, uri: str) -> int:
    """The newest version of the Delta table at `uri`."""
    return int(session.sql(f"DESCRIBE HISTORY {table_ref(uri)} LIMIT 1").collect()[0]["version"])


def is_gone(error: BaseException) -> bool:
    text = f"{type(error).__name__}: {error}"
    return any(marker in text for marker in GONE)


class StateJob:
    """Runs on one Spark session of its own (its session settings carry the idempotent write's
    version and must not reach the change log's writes), from one thread at a time."""

    def __init__(
        self,
        session: Any,
        *,
        changes: str,
        state_table: str,
        optimize_every_s: float,
        history_table: str | None = None,  # None: no history kept
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),  # the host's clock
        hints: HintsKept | None = None,  # None: no hints
    ) -> None:
        self.session = session
        for key, value in JOB_CONF.items():
            session.conf.set(key, value)
        self.changes = changes
        self.state_table = state_table
        self.history_table = history_table
        self.optimize_every_s = optimize_every_s
        self.optimized_at: datetime | None = None  # kept in the job's lease for the next holder
        self._wall = wall
        self._applied: int | None = None  # as of our last run; None: read it from the table
        self._in_step = False  # both tables held `_applied` (the history's fast path needs it)
        self._checked = False  # tables of an older cfp brought up to date (once per holder)
        self.hints = None if hints is None else HintFolding(
            session, kept=hints, state_table=state_table,
            write=lambda version, statement: idempotent(
                session, HINTS_APP_ID, version, statement, meta=hints_metadata(version)),
        )  # fmt: skip
        self.changes_every_s = 0.0 if hints is None else hints.changes_every_s
        self._fed_at = -float("inf")  # monotonic: the change log's last fold

    def forget(self) -> None:
        """Another host may have run the job since our last run: read the version applied
        from the table next time instead of remembering it."""
        self._applied = None
        if self.hints is not None:
            self.hints.forget()

    def run_once(self, *, final: bool = False) -> StateRun:
        """One run (blocking); `final` folds the change log even when it is not due. Errors:
        Spark's; a run that failed changed nothing (a hints MERGE before it stays: the guard
        makes it safe to apply again)."""
        started = time.monotonic()
        if not self._checked:
            keep_closed_versions_only(self.session, self.state_table, self.history_table)
            self._checked = True
        # the hints first, so they wait for no MERGE of the feed's; their error is raised once
        # the feed's rows are in: a hints table that cannot be read must not hold the feed back
        hinted, hints_failed = (None, None) if self.hints is None else self.hints.run_or_fail()
        applied = self._applied if self._applied is not None else self.applied_version()
        latest = self.latest_version()
        run = StateRun(max(applied, 0) if latest == 0 else applied, latest)
        due = final or hints_failed is not None or started - self._fed_at >= self.changes_every_s
        if run.applied < latest and due:  # (version 0 made the table: it has no rows to apply)
            try:
                run = self._apply(applied, min(latest, applied + MAX_VERSIONS), latest)
            except Exception:
                self.forget()
                raise
            # from its start: spaced from its end, folds of more commits each ran longer
            # (bench/freshness: 26-41 s a fold, hints' state p99 56.5 s, not 34.3 s)
            self._fed_at = started
        self._applied = run.applied
        if hints_failed is not None:  # the feed's rows are in; the hints are taken next run
            raise hints_failed
        unconfirmed = None if self.hints is None else self.hints.count_if_due()
        optimized = self._optimize_if_due()
        return dataclasses.replace(
            run, hints=hinted, unconfirmed=unconfirmed, optimized=optimized,
            seconds=round(time.monotonic() - started, 3),
        )  # fmt: skip

    @property
    def tables(self) -> list[str]:
        """The tables the job writes: the state, and the history when it is kept."""
        return [self.state_table, *([self.history_table] if self.history_table else [])]

    def applied_version(self) -> int:
        """The change-log version both tables hold (-1: none)."""
        each = {self._applied_to(uri) for uri in self.tables}
        self._in_step = len(each) == 1
        return min(each)

    def _applied_to(self, uri: str) -> int:
        newest = self._job_commits(uri, stop_at=lambda _: True)
        return newest[0][1] if newest else -1

    def _job_commits(self, uri: str, stop_at: Callable[[int], bool]) -> list[tuple[int, int]]:
        """This job's commits to table `uri`, newest first, as (table version, change-log
        version applied), down to the first whose change-log version `stop_at` accepts (the
        recent commits first, then all of them when that one is not among them)."""
        table = table_ref(uri)
        recent = self._sql(f"DESCRIBE HISTORY {table} LIMIT {HISTORY_LOOKBACK}")
        if len(recent) >= HISTORY_LOOKBACK and not any(stop_at(v) for _, v in _commits_of(recent)):
            recent = self._sql(f"DESCRIBE HISTORY {table}")
        out = []
        for commit in _commits_of(recent):
            out.append(commit)
            if stop_at(commit[1]):
                break
        return out

    def latest_version(self) -> int:
        return newest_version(self.session, self.changes)

    def _apply(self, applied: int, end: int, latest: int) -> StateRun:
        whole = applied < 0
        try:
            counts, history = self._merge(applied, end, rebuild=whole)
        except Exception as e:
            if whole or not is_gone(e):
                raise
            log.warning(
                "state.reading_whole_change_log",
                reason=str(e).splitlines()[0][:300],
                applied=applied,
            )
            whole = True
            counts, history = self._merge(applied, end, rebuild=True)
        if counts is None:  # Delta skipped it: another run recorded this version or a later one
            applied = self.applied_version()
            return StateRun(applied, latest, skipped=True, whole=whole, history=history)
        inserted, updated = counts
        return StateRun(end, latest, inserted, updated, whole=whole, history=history)

    def _merge(
        self, applied: int, end: int, *, rebuild: bool
    ) -> tuple[tuple[int, int] | None, str]:
        """MERGE the rows of change-log commits (applied, end] (all up to `end` when `rebuild`) into
        the state, then the history: the state's counts (inserted, updated; None when Delta skipped
        the write as already done) and how the history took them (`StateRun.history`)."""
        rows = added_rows(self.session, self.changes, applied, end, whole=rebuild)
        name = uuid.uuid4().hex
        changes_view, source_view = f"cfp_changes_{name}", f"cfp_state_{name}"
        rows.createOrReplaceTempView(changes_view)
        hints = self.hints is not None
        extra = state_table.FEED_CANDIDATE_EXTRA if hints else ""
        newest = self.session.sql(state_table.newest_per_blob(changes_view, extra=extra))
        newest.createOrReplaceTempView(source_view)
        head = newest_version(self.session, self.history_table) if self.history_table else None
        how = ""
        try:
            statement = state_table.merge_statement(self.state_table, source_view, hints=hints)
            result = self._idempotent(APP_ID, end, statement)
            if self.history_table is not None:
                replaced, state_at = (
                    # a rebuild folds every event up to `end`; a version of a newer state past
                    # it is completed by the next run, whose events reach it
                    (None, newest_version(self.session, self.state_table))
                    if rebuild
                    else self._replaced(applied, bool(result), head)
                )
                written = apply_history(
                    self.session,
                    history_uri=self.history_table,
                    state_uri=self.state_table,
                    changes_view=changes_view,
                    replaced=replaced,
                    state_at=state_at,
                    write=lambda statement, retry: self._idempotent(
                        HISTORY_APP_ID, end, statement, retry=retry
                    ),
                )
                # both tables now hold `end`, unless another run wrote the history first (a
                # MERGE returns no rows then; an append never returns any: read it back)
                self._in_step = bool(written.rows) or (
                    written.appended and self._applied_to(self.history_table) == end
                )
                how = ("appended" if written.appended else "merged") if self._in_step else ""
        finally:
            for view in (source_view, changes_view):
                self.session.catalog.dropTempView(view)
        if not result:
            return None, how
        row = result[0]
        return (int(row["num_inserted_rows"]), int(row["num_updated_rows"])), how

    def _replaced(
        self, applied: int, merged: bool, head: int | None
    ) -> tuple[Replaced | None, int]:
        """The state commits that applied change-log versions after `applied` (ours included
        when `merged`): the rows they replaced are versions the history has not taken. Alone
        (the fast path) when ours is the only one, the tables were in step, and the history
        has had no commit since `head`, its newest before our MERGE. With the state's version
        whose rows are the open versions: the newest of this job's commits seen."""
        commits = self._job_commits(self.state_table, lambda a: a <= applied)
        state_at = commits[0][0] if commits else newest_version(self.session, self.state_table)
        newer = [v for v, a in commits if a > applied]
        if not newer:
            return None, state_at
        alone = merged and self._in_step and len(newer) == 1
        if alone:  # and no commit to the history since our MERGE began
            alone = newest_version(self.session, str(self.history_table)) == head
        return Replaced(min(newer), max(newer), alone), state_at

    def _idempotent(
        self, app_id: str, version: int, statement: str, *, retry: bool = True
    ) -> list[Any]:
        return idempotent(self.session, app_id, version, statement, retry=retry)

    def _optimize_if_due(self) -> bool:
        now = self._wall()
        if self.optimized_at is None:
            self.optimized_at = now  # a new holder waits a whole interval first
            return False
        if (now - self.optimized_at).total_seconds() < self.optimize_every_s:
            return False
        optimize(self.session, self.changes, *self.tables)
        self.optimized_at = now
        return True

    def _sql(self, statement: str) -> list[Any]:
        return list(self.session.sql(statement).collect())


def idempotent(
    session: Any,
    app_id: str,
    version: int,
    statement: str,
    *,
    retry: bool = True,
    meta: str | None = None,
) -> list[Any]:
    """Run `statement` as write `version` of `app_id`, recorded in its commit (`meta`, by
    default the change-log version; Delta skips it, returning no rows, when that version or
    a later one was recorded already); a commit conflict is retried unless `retry` is
    False."""
    conf = session.conf
    for attempt in conflict_retrying() if retry else conflict_retrying(1):
        with attempt:
            conf.set("spark.databricks.delta.write.txnAppId", app_id)
            conf.set("spark.databricks.delta.write.txnVersion", str(version))
            conf.set(
                "spark.databricks.delta.commitInfo.userMetadata",
                meta or commit_metadata(version),
            )
            try:
                return list(session.sql(statement).collect())
            finally:
                conf.unset("spark.databricks.delta.commitInfo.userMetadata")
                conf.unset("spark.databricks.delta.write.txnAppId")
                conf.unset("spark.databricks.delta.write.txnVersion")
    raise AssertionError("conflict_retrying reraises")  # pragma: no cover


def optimize(session: Any, *tables: str) -> None:
    """Compact the small files of `tables` (retried when a write commits meanwhile)."""
    for uri in tables:
        for attempt in conflict_retrying():
            with attempt:
                session.sql(f"OPTIMIZE {table_ref(uri)}").collect()
