"""`cfp verify`'s check of the history table against the state table.

The history table holds the closed versions of each blob; its open version is its state row.
So, per blob: no version in the history table is open; each closed version ends where the
next one begins (their sequencers meet); and the newest ends where the state row begins (the
state row's sequencer). A blob that breaks one of these, or has closed versions and no state
row, is a difference. Read with delta-rs, as the state is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError, TableNotFoundError

from processor.admin.verify import VerifyError

Key = tuple[str, str]  # container, blob


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


def check_history(
    history_uri: str, state_uri: str, storage_options: Mapping[str, str]
) -> list[str] | None:
    """The differences (blocking); None when there is no history table (`--no-history`).
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
    except (DeltaError, OSError, pa.ArrowException) as e:
        raise VerifyError(f"{history_uri}: cannot read the history table: {e}") from e
    return history_differences(
        (
            ((r["container"], r["blob"]), Closed(r["ends"], int(r["open"]), int(r["breaks"])))
            for r in closed
        ),
        {(r["container"], r["blob"]): str(r["sequencer"]) for r in rows},
    )
