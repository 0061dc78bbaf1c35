"""The Delta tables under `--output`: how they are made, a clear error for an old layout, and
the one step that brings tables of an older cfp up to date.

`OUTPUT/changes` (the change log) is partitioned by `shard`: a lease's floor read (`change_log.py`)
reads its own partition only, and checkpoints every 100 commits (a commit per lease and write).
Change data feed is on: the state job reads the rows each commit added.
`OUTPUT/state` (one row per blob) and `OUTPUT/history` (one per version of a blob) have
deletion vectors on, so that a MERGE writes the rows it changes rather than rewriting whole
files. Each is made with `CREATE TABLE IF NOT EXISTS`; two hosts making one at the same moment
may see theirs refused until the other's exists. The state has its change data feed on too: the
history's closed versions are the rows the state's MERGEs replace (`history_run`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import structlog
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from observers.builtin.spark.commits import conflict_retrying, is_conflict
from observers.builtin.spark.session.output import Output
from observers.builtin.spark.sql import sql_string, table_ref
from observers.builtin.spark.state.history import HISTORY_SCHEMA, open_copies_removed
from observers.builtin.spark.state.state_table import HINT_COLUMNS, STATE_SCHEMA
from observers.builtin.spark.waits import logged_wait
from observers.changes import CHANGES_SCHEMA
from observers.errors import PluginLoadError

log = structlog.get_logger("cfp.spark")

CHANGES_PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableDeletionVectors": "true",
    # statistics (data skipping) on the columns that are filtered on; not on `raw`
    "delta.dataSkippingStatsColumns": "position,id,event_type,event_time,container,blob",
    # a commit per lease and write: at Delta's default of 10, a checkpoint (the whole file list,
    # about a second on 2 cores) every few writes
    "delta.checkpointInterval": "100",
}
STATE_PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableDeletionVectors": "true",
    "delta.dataSkippingStatsColumns": "container,blob,event_time,sequencer",
}
HINTS_PROPERTIES = {
    "delta.enableChangeDataFeed": "true",  # the state job reads the rows each append added
    "delta.dataSkippingStatsColumns": "container,blob,sequencer,read_timestamp",
    # a commit per host every --spark-max-wait: at Delta's default of 10, a checkpoint every few
    # seconds, each writing the whole (growing) file list
    "delta.checkpointInterval": "100",
}
HISTORY_PROPERTIES = {
    "delta.enableDeletionVectors": "true",
    "delta.dataSkippingStatsColumns": (
        "container,blob,valid_from,valid_from_sequencer,valid_to,valid_to_sequencer"
    ),
}
OLD_LAYOUT = (
    "holds tables of an older cfp (a change log of hard-linked Parquet files under "
    "changes/lease=*/ and a bucketed state table with _cfp/), not Delta tables: give a new "
    "--output (the old folder stays readable with any Parquet reader)"
)

CREATE_ATTEMPTS = 8
CREATION_RACE = re.compile(
    r"DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION|FileAlreadyExists|already exists", re.IGNORECASE
)

_SQL_TYPES = {
    pa.string(): "STRING",
    pa.int64(): "BIGINT",
    pa.bool_(): "BOOLEAN",
    pa.timestamp("us", tz="UTC"): "TIMESTAMP",
}


def sql_type(kind: pa.DataType) -> str:
    """The Spark SQL type of one of our Arrow column types."""
    if kind in _SQL_TYPES:
        return _SQL_TYPES[kind]
    if pa.types.is_map(kind):
        return f"MAP<{sql_type(kind.key_type)}, {sql_type(kind.item_type)}>"
    if pa.types.is_list(kind):
        return f"ARRAY<{sql_type(kind.value_type)}>"
    raise TypeError(f"no Spark SQL type for {kind}")


def columns_ddl(schema: pa.Schema, *, sep: str = ", ") -> str:
    """The columns of `schema` in Spark SQL (`name TYPE [NOT NULL]`): a table's, a source's."""
    return sep.join(
        f"`{f.name}` {sql_type(f.type)}{'' if f.nullable else ' NOT NULL'}" for f in schema
    )


def create_statement(
    uri: str, schema: pa.Schema, properties: dict[str, str], *, partitioned_by: str = ""
) -> str:
    columns = columns_ddl(schema, sep=",\n  ")
    props = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in properties.items())
    partition = f"\nPARTITIONED BY (`{partitioned_by}`)" if partitioned_by else ""
    return (
        f"CREATE TABLE IF NOT EXISTS {table_ref(uri)} (\n  {columns}\n) USING DELTA"
        f"{partition}\nTBLPROPERTIES ({props})"
    )


def check_layout(output: Output) -> None:
    """Errors: `PluginLoadError` when a local `--output` holds the tables of an older cfp."""
    if output.local is None:
        return  # the old layout was never written to object storage
    changes = output.local / "changes"
    old = (output.local / "_cfp").is_dir() or (
        changes.is_dir()
        and not (changes / "_delta_log").is_dir()
        and any(_is_old_entry(p) for p in changes.iterdir())
    )
    if old:
        raise PluginLoadError("spark", f"--output {output.local} {OLD_LAYOUT}")


def _is_old_entry(path: Path) -> bool:
    return path.name.startswith("lease=") or path.suffix == ".parquet"


def create_tables(
    session: Any,
    output: Output,
    *,
    is_local_spark: bool = True,
    history: bool = True,
    hints: bool = False,
) -> None:
    """Make the tables unless they exist (blocking): the change log, the state, the history
    unless it is not kept, and with `hints` the hints (the state then gets `HINT_COLUMNS` too).
    Errors: `PluginLoadError` for an old layout (looked for only when Spark runs here: a local
    path of a Spark Connect server is on the server); Spark's own for storage it cannot
    reach."""
    if is_local_spark:
        check_layout(output)
    made = [
        (output.changes, CHANGES_SCHEMA, CHANGES_PROPERTIES, "shard"),
        (output.state, STATE_SCHEMA, STATE_PROPERTIES, ""),
    ]
    if history:
        made.append((output.history, HISTORY_SCHEMA, HISTORY_PROPERTIES, ""))
    if hints:
        made.append((output.hints, CHANGES_SCHEMA, HINTS_PROPERTIES, ""))
    for uri, schema, properties, partition in made:
        create_table(
            session, uri, create_statement(uri, schema, properties, partitioned_by=partition)
        )
    if hints:
        with_hint_columns(session, output.state)


def with_hint_columns(session: Any, state_uri: str) -> None:
    """The state table with `HINT_COLUMNS` (added to one made without them; idempotent)."""
    missing = _missing_hint_columns(session, state_uri)
    if not missing:
        return
    columns = columns_ddl(pa.schema(missing))
    for attempt in conflict_retrying():
        with attempt:
            try:
                session.sql(f"ALTER TABLE {table_ref(state_uri)} ADD COLUMNS ({columns})").collect()
            except Exception:
                # another host added them first: Delta says so as "already exists", or, when
                # ours was retried after its commit lost to theirs, as duplicate columns
                if _missing_hint_columns(session, state_uri):
                    raise
                return
    log.info("spark.state_hint_columns_added", state=state_uri)


def _missing_hint_columns(session: Any, state_uri: str) -> list[pa.Field]:
    have = {row["col_name"] for row in session.sql(f"DESCRIBE {table_ref(state_uri)}").collect()}
    return [f for f in HINT_COLUMNS if f.name not in have]


def create_table(session: Any, uri: str, statement: str) -> None:
    """Run `statement` (CREATE TABLE IF NOT EXISTS), riding out another host making the same
    table at the same moment: its commit of version 0 wins, or its first files are there before
    that commit is (Delta then refuses a "non-empty location"). Fine once the table exists; any
    other error at once."""
    for attempt in Retrying(
        retry=retry_if_exception(is_creation_race),
        stop=stop_after_attempt(CREATE_ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.5, max=8.0),
        before_sleep=logged_wait("spark.table_creation_raced", table=uri),
        reraise=True,
    ):
        with attempt:
            try:
                session.sql(statement).collect()
            except Exception:
                if not is_delta_table(session, uri):
                    raise


def is_creation_race(error: BaseException) -> bool:
    """An error of a table made by two writers at once (rather than storage or credentials)."""
    return is_conflict(error) or bool(CREATION_RACE.search(f"{type(error).__name__}: {error}"))


def is_delta_table(session: Any, uri: str) -> bool:
    try:
        rows = session.sql(f"DESCRIBE DETAIL {table_ref(uri)}").collect()
    except Exception:
        return False
    return bool(rows) and str(rows[0]["format"]).lower() == "delta"


def keep_closed_versions_only(session: Any, state_uri: str, history_uri: str | None) -> bool:
    """Bring tables made before the history kept closed versions only up to date: their state
    has no change data feed, and their history holds each blob's open version as well, a copy
    of its state row. Drops those copies, then turns the feed on; each step is idempotent, so
    a holder stopped between them has the next one do both. True when there was work."""
    detail = session.sql(f"DESCRIBE DETAIL {table_ref(state_uri)}").collect()[0]
    if (detail["properties"] or {}).get("delta.enableChangeDataFeed") == "true":
        return False
    feed_on = "'delta.enableChangeDataFeed' = 'true'"
    steps = [f"ALTER TABLE {table_ref(state_uri)} SET TBLPROPERTIES ({feed_on})"]
    if history_uri is not None and is_delta_table(session, history_uri):
        steps.insert(0, open_copies_removed(history_uri, state_uri))
    for statement in steps:
        for attempt in conflict_retrying():
            with attempt:
                session.sql(statement).collect()
    log.info("spark.tables_upgraded", state=state_uri, history=history_uri)
    return True
