"""`cfp verify`'s check of the history table against the state table.

The history table holds the closed versions of each blob; its open version is its state row.
So, per blob: no version in the history table is open; each closed version ends where the
next one begins (their sequencers meet); and the newest ends where the state row begins (the
state row's sequencer). A blob that breaks one of these, or has closed versions and no state
row, is a difference. Read with delta-rs, as the state is.

The state job commits the state, then the history: a run stopped between the two (a drain cut
short) leaves the history behind the state until the job's next run. The change-log version
each table's newest job commit applied tells that case apart, and the report says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError, TableNotFoundError

from processor.admin.verify import VerifyError

Key = tuple[str, str]  # container, blob
AppliedVersion = Callable[[list[dict[str, Any]]], int | None]
"""The change-log version the state job's newest commit among these (newest first) applied."""
COMMITS_READ = 100  # of each table, newest first: the state job's newest is among them


@dataclass(frozen=True, slots=True)
class Closed:
    """A blob's closed versions in the history table, summed up."""

    ends: str | None  # the newest valid_to_sequencer
    open: int = 0  # versions with no end (the table should hold none)
    breaks: int = 0  # versions whose end is not the next version's start


CLOSED_VERSIONS = """SELECT container, blob, max(valid_to_sequencer) AS ends,
  sum(CASE WHEN valid_to_sequencer IS NULL THEN 1 ELSE 0 END) AS open,
  sum(CASE WHEN next_from <> valid_to_sequencer THEN 1 ELSE 0 END) AS breaks
FROM (
  SELECT container, blob, valid_to_sequencer, lead(valid_from_sequencer) OVER (
    PARTITION BY container, blob ORDER BY valid_from_sequencer, event_id) AS next_from
  FROM history
) GROUP BY container, blob"""
STATE_ROWS = "SELECT container, blob, sequencer FROM state"


def history_differences(
    closed: Iterable[tuple[Key, Closed]], state: Mapping[Key, str]
) -> list[str]:
    """What differs between the closed versions and the state rows (their sequencers), a
    line per blob, sorted."""
    out = []
    for key, versions in sorted(closed, key=lambda kv: kv[0]):
        where, opens = f"{key[0]}/{key[1]}", state.get(key)
        if versions.open:
            out.append(f"{where}: {versions.open} open versions in the history table")
        if versions.breaks:
            out.append(f"{where}: {versions.breaks} of its versions end where no version begins")
        if opens is None:
            out.append(f"{where}: closed versions in the history, no row in the state")
        elif versions.ends is not None and versions.ends != opens:
            out.append(
                f"{where}: the newest closed version ends at sequencer {versions.ends}, "
                f"the state row begins at {opens}"
            )
    return out


@dataclass(frozen=True, slots=True)
class HistoryCheck:
    """The differences, a line per blob; and the change-log versions the history and the state
    hold when the history's is older (None: in step, or not known)."""

    differences: list[str]
    behind: tuple[int, int] | None = None

    def __bool__(self) -> bool:
        return bool(self.differences)


def behind(history_applied: int | None, state_applied: int | None) -> tuple[int, int] | None:
    """(history's, state's) change-log version when the history holds an older one."""
    held = -1 if history_applied is None else history_applied  # -1: the job never wrote it
    if state_applied is None or held >= state_applied:
        return None
    return held, state_applied


def check_history(
    history_uri: str,
    state_uri: str,
    storage_options: Mapping[str, str],
    *,
    applied: AppliedVersion,
) -> HistoryCheck | None:
    """The differences (blocking); None when there is no history table (`--no-history`).
    `applied` reads a table's commits (the state job's, which records what it applied).
    Errors: `VerifyError` for a table that cannot be read."""
    options = dict(storage_options) or None
    try:
        history = DeltaTable(history_uri, storage_options=options)
    except TableNotFoundError:
        return None
    try:
        state = DeltaTable(state_uri, storage_options=options)
        query = QueryBuilder().register("history", history).register("state", state)
        closed = pa.table(query.execute(CLOSED_VERSIONS)).to_pylist()
        rows = pa.table(query.execute(STATE_ROWS)).to_pylist()
        differences = history_differences(
            (
                ((r["container"], r["blob"]), Closed(r["ends"], int(r["open"]), int(r["breaks"])))
                for r in closed
            ),
            {(r["container"], r["blob"]): str(r["sequencer"]) for r in rows},
        )
        lag = None
        if differences:  # why they differ, read only when they do: each table's newest commits
            held, applied_to_state = (applied(t.history(COMMITS_READ)) for t in (history, state))
            lag = behind(held, applied_to_state)
    except (DeltaError, OSError, pa.ArrowException) as e:
        raise VerifyError(f"{history_uri}: cannot read the history table: {e}") from e
    return HistoryCheck(differences, lag)
