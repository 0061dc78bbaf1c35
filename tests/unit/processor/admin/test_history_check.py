"""`cfp verify`'s history check: each blob's open version is its state row."""

from __future__ import annotations

from processor.admin.history_check import history_differences

A, B, C = ("c", "a"), ("c", "b"), ("d", "c")


def test_open_versions_that_are_the_state_rows_differ_in_nothing() -> None:
    state = {A: ("01", False, "0x1"), B: ("07", True, None)}
    assert history_differences([(A, state[A]), (B, state[B])], state) == []


def test_each_way_a_history_can_disagree_with_the_state_is_named() -> None:
    state = {A: ("02", False, "0x2"), B: ("03", False, "0x3"), C: ("04", True, None)}
    opened = [
        (A, ("01", False, "0x1")),  # an older version left open
        (B, ("03", False, "0x3")),
        (B, ("05", False, "0x5")),  # two open versions
        (("e", "x"), ("01", False, "0x9")),  # not in the state
    ]  # C: no open version
    assert history_differences(opened, state) == [
        "c/a: open version etag '0x1' at sequencer 01, state row etag '0x2' at sequencer 02",
        "c/b: 2 open versions in the history",
        "d/c: a row in the state, no open version in the history",
        "e/x: an open version in the history, no row in the state",
    ]
