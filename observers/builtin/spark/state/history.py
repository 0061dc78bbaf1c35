"""The history table: the account by event time, one row per version of each blob (SCD type 2).

A version is the blob as it stood after one event, from that event (`valid_from`,
`valid_from_sequencer`) until the blob's next event (`valid_to`, `valid_to_sequencer`; NULL
while it is the current version). Its columns are those of the current-state table after that
event, so the open version of each blob is its state row; a delete closes the version before it
and opens one with `deleted` set (the blob absent until it is created again).

Kept by the state job in the same run as the state, applied exactly once the same way (its own
`txnAppId`). Events arrive out of order and more than once: a run folds again only what its
new events can change, the *tail* of each blob they touch (the version open at the oldest new
sequencer, and every later one), from that tail's rows and the new events together, in
sequencer order. Each row holds the event that opened it and the registers it had (`tier`,
`tags` with the sequencers that set them), so no older row is needed: a register carried from
before the tail is in the tail's first row, and a newer setter always outranks it (registers
are folded by the setter's sequencer, not by position). Rows are never removed: a fold only
closes a version earlier, or changes the registers of later ones.
"""

from __future__ import annotations

import pyarrow as pa

from observers.builtin.spark.sql import table_ref
from observers.builtin.spark.state.state_table import NEWEST, REGISTERS, STATE_SCHEMA, blob_events
from observers.changes import TIMESTAMP

RENAMED = {"event_time": "valid_from", "sequencer": "valid_from_sequencer"}
"""State columns that name the version's start in the history."""

HISTORY_SCHEMA = pa.schema(
    [
        STATE_SCHEMA.field("container"),
        STATE_SCHEMA.field("blob"),
        pa.field("valid_from", TIMESTAMP, nullable=False),
        pa.field("valid_from_sequencer", pa.string(), nullable=False),
        pa.field("valid_to", TIMESTAMP),
        pa.field("valid_to_sequencer", pa.string()),
        *(f for f in STATE_SCHEMA if f.name not in ("container", "blob", *RENAMED)),
    ]
)
"""A state row after the event that opened the version (`valid_from*` are that event's time and
sequencer), and when the next event of the blob closed it (`valid_to*`, NULL: still open)."""

KEY = ("container", "blob", "valid_from_sequencer", "event_id")
"""A version is the event that opened it."""


def tail_folded(versions: str, source: str, *, tails_only: bool = False) -> str:
    """SQL: the versions the change log rows of view `source` make or change, folded again
    with the tail of each blob they touch, taken from the relation `versions` (rows in
    `HISTORY_SCHEMA`: closed versions, and open ones); rows in `HISTORY_SCHEMA`.

    `tails_only`: `versions` is the tails themselves, one version per blob, older than every
    new event of its blob (`history_run`'s common case), so neither the join that finds the
    tails nor the pass that drops an event met twice is needed."""
    own = [n for n in NEWEST if n not in ("event_time", "sequencer")]
    tail_registers = ", ".join(
        f"CASE WHEN {seq} IS NOT NULL THEN named_struct('value', {value}, 'seq', {seq}) END "
        f"AS {value}_set"
        for value, seq in REGISTERS
    )
    new_registers = ", ".join(
        f"CASE WHEN resets OR {value} IS NOT NULL THEN named_struct('value', {value}, 'seq', "
        f"sequencer) END AS {value}_set"
        for value, _ in REGISTERS
    )
    folded_registers = ",\n    ".join(
        f"max_by({value}_set, {value}_set.seq) OVER upto AS {value}_set" for value, _ in REGISTERS
    )
    columns = ",\n  ".join(_history_column(name) for name in HISTORY_SCHEMA.names)
    tail, distinct = _tails_and_copies(versions, tails_only)
    return f"""WITH new_events AS (
  {blob_events(source)}
), touched AS (
  SELECT container, blob, min(sequencer) AS since FROM new_events GROUP BY container, blob
), tail AS (
  {tail}
), events AS (
  SELECT container, blob, valid_from AS event_time, valid_from_sequencer AS sequencer,
    {", ".join(own)}, {tail_registers}, 0 AS rank
  FROM tail
  UNION ALL
  SELECT container, blob, event_time, sequencer, {", ".join(own)}, {new_registers}, 1 AS rank
  FROM new_events
), distinct_events AS (
  {distinct}
), folded AS (
  SELECT container, blob, event_time, sequencer, {", ".join(own)},
    lead(event_time) OVER next AS valid_to,
    lead(sequencer) OVER next AS valid_to_sequencer,
    {folded_registers}
  FROM distinct_events
  WINDOW next AS (PARTITION BY container, blob ORDER BY sequencer, event_id),
    upto AS (PARTITION BY container, blob ORDER BY sequencer, event_id
      ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT
  {columns}
FROM folded"""


def _tails_and_copies(versions: str, tails_only: bool) -> tuple[str, str]:
    """SQL of `tail_folded`'s steps that find the tails in `versions` and drop an event met
    twice (in the tails and among the new events, or twice among them)."""
    if tails_only:
        return f"SELECT * FROM {versions}", "SELECT * FROM events"
    tail = f"""SELECT h.* FROM {versions} h
  JOIN touched t ON h.container = t.container AND h.blob = t.blob
  WHERE h.valid_to_sequencer IS NULL OR h.valid_to_sequencer > t.since"""
    distinct = """SELECT * FROM (
    SELECT *, row_number() OVER (
      PARTITION BY container, blob, sequencer, event_id ORDER BY rank) AS copy
    FROM events
  ) WHERE copy = 1"""
    return tail, distinct


def _history_column(name: str) -> str:
    """Where column `name` of a history row is in the `folded` rows of `tail_folded`."""
    for value, seq in REGISTERS:
        if name == value:
            return f"{value}_set.value AS {value}"
        if name == seq:
            return f"{value}_set.seq AS {seq}"
    starts = {v: k for k, v in RENAMED.items()}
    return f"{starts[name]} AS {name}" if name in starts else name


def merge_statement(history_uri: str, source: str) -> str:
    """SQL: apply the folded versions of view `source` to the history table: a new version is
    inserted; a known one is rewritten only when it closes at another event or its registers
    come from another setter (nothing else of a version can change)."""
    on = " AND ".join(f"t.{k} = s.{k}" for k in KEY)
    changed = " OR ".join(
        f"NOT (t.{c} <=> s.{c})" for c in ("valid_to_sequencer", *(seq for _, seq in REGISTERS))
    )
    return (
        f"MERGE INTO {table_ref(history_uri)} AS t\nUSING {source} AS s\nON {on}\n"
        f"WHEN MATCHED AND ({changed}) THEN UPDATE SET *\n"
        "WHEN NOT MATCHED THEN INSERT *"
    )


def as_versions(state: str) -> str:
    """SQL: the rows of the state relation `state` as open versions (rows in `HISTORY_SCHEMA`)."""
    made_from = {new: f"{old} AS {new}" for old, new in RENAMED.items()}
    made_from["valid_to"] = "CAST(NULL AS TIMESTAMP) AS valid_to"
    made_from["valid_to_sequencer"] = "CAST(NULL AS STRING) AS valid_to_sequencer"
    columns = ", ".join(made_from.get(name, name) for name in HISTORY_SCHEMA.names)
    return f"SELECT {columns} FROM {state}"


def every_version(history_uri: str, state_uri: str, state_version: int | None = None) -> str:
    """SQL: the account's history as users query it: the closed versions the history table
    holds and the open ones, which are the state's rows (as of `state_version`, else now)."""
    state = table_ref(state_uri)
    if state_version is not None:
        state = f"(SELECT * FROM {state} VERSION AS OF {state_version})"
    return f"SELECT * FROM {table_ref(history_uri)} UNION ALL {as_versions(state)}"


def open_copies_removed(history_uri: str, state_uri: str) -> str:
    """SQL: delete the history's open versions that are copies of a state row (tables made
    when the history kept the open versions too)."""
    return (
        f"MERGE INTO {table_ref(history_uri)} AS t\nUSING {table_ref(state_uri)} AS s\n"
        "ON t.container = s.container AND t.blob = s.blob AND t.valid_to_sequencer IS NULL\n"
        "  AND t.valid_from_sequencer = s.sequencer AND t.event_id = s.event_id\n"
        "WHEN MATCHED THEN DELETE"
    )
