"""`cfp verify`'s comparison and reading of the state table, and `cfp sql`'s text table."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from observers.builtin.spark.state.state_table import HINT_COLUMNS, STATE_SCHEMA
from processor.admin.verify import Blob, VerifyError, compare, read_state
from processor.cli.spark.table_commands import _text_table, mentions


def blob(
    name: str, etag: str = "0x1", size: int | None = 3, ctype: str | None = "text/plain"
) -> Blob:
    return Blob("c", name, etag, size, ctype)


def test_equal_sets_of_blobs_are_equal_whatever_their_order() -> None:
    result = compare([blob("a"), blob("b")], [blob("b"), blob("a")])
    assert result.is_equal and (result.state_blobs, result.account_blobs) == (2, 2)


def test_each_kind_of_difference_is_named() -> None:
    state = [blob("gone"), blob("same"), blob("changed", etag="0x1", size=3)]
    account = [blob("new"), blob("same"), blob("changed", etag="0x2", size=4)]
    result = compare(state, account)
    assert not result.is_equal
    assert [(d.name, d.problem) for d in result.differences] == [
        ("changed", "etag,size"),
        ("gone", "not in the account"),
        ("new", "missing from the state"),
    ]
    assert result.count("not in the account") == 1
    assert result.differences[0].describe() == (
        "c/changed: etag '0x1' in the state, '0x2' in the account; "
        "size 3 in the state, 4 in the account"
    )
    assert result.differences[2].describe() == "c/new: missing from the state"


def state_row(container: str, name: str, *, deleted: bool, size: int) -> dict[str, object]:
    row: dict[str, object] = dict.fromkeys(STATE_SCHEMA.names)
    row.update(
        container=container, blob=name, deleted=deleted, etag=f"0x{size}", content_length=size,
        event_type="BlobDeleted" if deleted else "BlobCreated", event_id=f"{name}-{size}",
        event_time=pa.scalar(0, pa.timestamp("us", tz="UTC")).as_py(), sequencer="01",
    )  # fmt: skip
    return row


def test_the_delta_state_table_is_read_live_rows_only(tmp_path: Path) -> None:
    rows = [
        state_row("c1", "a.txt", deleted=False, size=5),
        state_row("c1", "dir/b c", deleted=True, size=6),
    ]
    write_deltalake(str(tmp_path / "state"), pa.Table.from_pylist(rows, schema=STATE_SCHEMA))
    read = read_state((tmp_path / "state").as_uri(), {})
    live, tombstones = read.blobs, read.tombstones
    assert [(b.container, b.name, b.size, b.etag) for b in live] == [("c1", "a.txt", 5, "0x5")]
    assert tombstones == 1


def test_a_state_kept_with_hints_says_how_many_rows_are_provisional(tmp_path: Path) -> None:
    rows = [
        {**state_row("c1", "a.txt", deleted=False, size=5), "provisional": True},
        {**state_row("c1", "b", deleted=True, size=6), "provisional": True},
        {**state_row("c1", "c", deleted=False, size=7), "provisional": None},  # before hints
        {**state_row("c1", "d", deleted=False, size=8), "provisional": False},
    ]
    schema = pa.schema([*STATE_SCHEMA, *HINT_COLUMNS])
    write_deltalake(str(tmp_path / "state"), pa.Table.from_pylist(rows, schema=schema))
    read = read_state((tmp_path / "state").as_uri(), {})
    assert (len(read.blobs), read.tombstones, read.provisional) == (3, 1, 2)


def test_a_folder_without_a_state_table_is_named(tmp_path: Path) -> None:
    with pytest.raises(VerifyError, match="no state table here"):
        read_state((tmp_path / "nothing").as_uri(), {})


def test_sql_results_print_as_an_aligned_table_with_long_values_cut() -> None:
    text = _text_table(["a", "long"], [{"a": 1, "long": "x" * 10}, {"a": None, "long": "y"}], 6)
    assert text.splitlines() == ["a     long", "1     xxx...", "null  y", "(2 rows)"]


def test_a_history_view_is_made_only_for_a_query_that_names_it() -> None:
    assert mentions("SELECT version FROM changes_history ORDER BY 1", "changes_history")
    assert mentions("select * from `STATE_HISTORY`", "state_history")
    assert not mentions("SELECT * FROM changes", "changes_history")
    assert not mentions("SELECT * FROM changes_history2", "changes_history")
    assert not mentions("SELECT * FROM db.state_history", "state_history")
