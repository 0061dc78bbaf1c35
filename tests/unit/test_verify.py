"""`cfp verify`'s comparison and reading of the state table, and `cfp sql`'s text table."""

from __future__ import annotations

from pathlib import Path

import pytest

from observers.spark.state_table import StateTable
from processor.cli_spark import _text_table
from processor.verify import Blob, VerifyError, compare, read_state
from tests.unit.test_spark_state import Event, as_state


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


def test_the_state_table_is_read_live_rows_only(tmp_path: Path) -> None:
    table = StateTable(tmp_path / "state", tmp_path / "_cfp", buckets=2)
    table.open()
    table.apply(
        as_state([Event(0, 1, "created", 5), Event(1, 1, "created", 6), Event(1, 2, "deleted", 6)])
    )
    live, tombstones = read_state(tmp_path / "state")
    assert [(b.container, b.name, b.size, b.etag) for b in live] == [("c1", "a.txt", 5, "0x1")]
    assert tombstones == 1


def test_a_folder_without_a_state_table_is_named(tmp_path: Path) -> None:
    with pytest.raises(VerifyError, match="no state table here"):
        read_state(tmp_path / "nothing")


def test_sql_results_print_as_an_aligned_table_with_long_values_cut() -> None:
    text = _text_table(["a", "long"], [{"a": 1, "long": "x" * 10}, {"a": None, "long": "y"}], 6)
    assert text.splitlines() == ["a     long", "1     xxx...", "null  y", "(2 rows)"]
