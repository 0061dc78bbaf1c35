"""The SQL the Spark observer runs, built without Spark: quoting, the change log's MERGE, the
tables' definitions, the state job's bookkeeping. (What the SQL does is tested on real Delta
tables in tests/integration/test_delta_tables.py.)"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tenacity import wait_none

from observers.builtin.spark.changelog.change_log import ChangeLog
from observers.builtin.spark.commits import (
    is_conflict,
    is_retryable_conflict,
    is_transaction_conflict,
)
from observers.builtin.spark.sql import sql_string, table_ref
from observers.builtin.spark.state.state_job import applied_version, commit_metadata, is_gone
from observers.builtin.spark.state.state_table import STATE_SCHEMA
from observers.builtin.spark.tables import (
    CHANGES_PROPERTIES,
    create_statement,
    create_table,
    is_creation_race,
    sql_type,
)
from observers.changes import CHANGES_SCHEMA


@given(st.text())
def test_a_string_literal_has_no_unescaped_quote_or_backslash(value: str) -> None:
    literal = sql_string(value)
    assert literal[0] == literal[-1] == "'"
    body, i, plain = literal[1:-1], 0, []
    while i < len(body):  # read it back as Spark's lexer does
        if body[i] == "\\":
            plain.append(body[i + 1])
            i += 2
        else:
            assert body[i] != "'", literal
            plain.append(body[i])
            i += 1
    assert "".join(plain) == value


def test_a_table_path_is_quoted_as_an_identifier() -> None:
    assert table_ref("abfss://t@a.dfs.core.windows.net/x`y") == (
        "delta.`abfss://t@a.dfs.core.windows.net/x``y`"
    )


def test_a_lease_floor_read_prunes_to_its_partition_and_positions() -> None:
    class Session:
        text = ""

        def sql(self, text: str) -> Any:
            Session.text = text
            return type("R", (), {"collect": lambda _: [{"top": "p9"}]})()

    log = ChangeLog("file:///out/changes")
    assert log.max_position(Session(), "~c/it's", "p1") == "p9"
    assert Session.text == (
        "SELECT max(position) AS top FROM delta.`file:///out/changes` "
        "WHERE shard = '~c/it\\'s' AND position >= 'p1'"
    )


def test_the_tables_are_made_with_their_columns_partitioning_and_properties() -> None:
    sql = create_statement(
        "file:///o/changes", CHANGES_SCHEMA, CHANGES_PROPERTIES, partitioned_by="shard"
    )
    assert sql.startswith("CREATE TABLE IF NOT EXISTS delta.`file:///o/changes` (")
    assert "`id` STRING NOT NULL" in sql and "`api` STRING," in sql
    assert "`tags` MAP<STRING, STRING>" in sql and "`sort_keys` ARRAY<STRING> NOT NULL" in sql
    assert "`event_time` TIMESTAMP NOT NULL" in sql
    assert "PARTITIONED BY (`shard`)" in sql
    assert "'delta.enableChangeDataFeed' = 'true'" in sql
    assert all(sql_type(f.type) for f in STATE_SCHEMA)
    with pytest.raises(TypeError, match="no Spark SQL type"):
        sql_type(pa.float16())


def test_the_version_applied_is_the_newest_commit_of_the_state_job() -> None:
    history = [  # DESCRIBE HISTORY, newest first
        {"userMetadata": None},  # an OPTIMIZE
        {"userMetadata": commit_metadata(41)},
        {"userMetadata": commit_metadata(30)},
    ]
    assert applied_version(history) == 41
    assert applied_version([{"userMetadata": "not json"}, {"userMetadata": '{"x": 1}'}]) is None


def test_conflicts_and_vanished_commits_are_told_from_other_errors() -> None:
    class ConcurrentAppendException(Exception):
        pass

    assert is_conflict(ConcurrentAppendException("Files were added to partition [shard=00]"))
    assert is_conflict(RuntimeError("[DELTA_CONCURRENT_DELETE_READ] a concurrent OPTIMIZE"))
    assert not is_conflict(RuntimeError("[PATH_NOT_FOUND] Path does not exist"))
    fenced = RuntimeError("[DELTA_CONCURRENT_TRANSACTION] app id p/00 was set by another commit")
    assert is_transaction_conflict(fenced) and not is_retryable_conflict(fenced)
    assert is_retryable_conflict(RuntimeError("io.delta.exceptions.MetadataChangedException"))
    assert is_gone(RuntimeError("[DELTA_CHANGE_DATA_FILE_NOT_FOUND] part-0001 was vacuumed"))
    assert not is_gone(RuntimeError("[DELTA_CONCURRENT_APPEND] files were added"))


class CreatingSession:
    """Answers CREATE TABLE with `errors` in turn (None: made) and DESCRIBE DETAIL as a Delta
    table only once it was made, here or by the other host after `made_by_other` refusals."""

    def __init__(self, errors: list[Exception | None], made_by_other: int = 99) -> None:
        self.errors = errors
        self.made_by_other = made_by_other
        self.creates = 0
        self.made = False

    def sql(self, statement: str) -> Any:
        session = self

        class Result:
            def collect(self) -> list[dict[str, str]]:
                if statement.startswith("DESCRIBE DETAIL"):
                    return [{"format": "delta"}] if session.made else []
                session.creates += 1
                error = session.errors.pop(0) if session.errors else None
                if session.creates >= session.made_by_other:
                    session.made = True
                if error is not None:
                    raise error
                session.made = True
                return []

        return Result()


RACE = RuntimeError("[DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION] Cannot create table")


def test_a_table_another_host_is_making_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "observers.builtin.spark.tables.wait_random_exponential", lambda **_: wait_none()
    )
    other_first = CreatingSession([RACE, RACE], made_by_other=2)  # made by the other host
    create_table(other_first, "/t", "CREATE TABLE IF NOT EXISTS t")
    assert (other_first.creates, other_first.made) == (2, True)
    ours_later = CreatingSession([RACE, RACE, None])  # its files were there, not the table
    create_table(ours_later, "/t", "CREATE TABLE IF NOT EXISTS t")
    assert ours_later.creates == 3


def test_any_other_error_of_a_create_is_raised_at_once() -> None:
    session = CreatingSession([PermissionError("403 This request is not authorized")])
    with pytest.raises(PermissionError, match="403"):
        create_table(session, "/t", "CREATE TABLE IF NOT EXISTS t")
    assert session.creates == 1
    assert is_creation_race(RACE) and not is_creation_race(PermissionError("403"))
