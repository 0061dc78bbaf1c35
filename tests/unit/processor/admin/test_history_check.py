"""`cfp verify`'s history check: the closed versions meet, and the newest meets the state row."""

from __future__ import annotations

from processor.admin.history_check import Closed, behind, history_differences

A, B, C = ("c", "a"), ("c", "b"), ("d", "c")


def test_closed_versions_that_lead_to_the_state_rows_differ_in_nothing() -> None:
    state = {A: "03", B: "07", C: "01"}  # C: one version, open (its state row)
    assert history_differences([(A, Closed("03")), (B, Closed("07"))], state) == []


def test_each_way_a_history_can_disagree_with_the_state_is_named() -> None:
    state = {A: "05", B: "03", C: "04"}
    closed = [
        (A, Closed("02")),  # the version from 02 to 05 is missing
        (B, Closed("03", open=2)),  # open versions left in the history table
        (C, Closed("04", breaks=1)),  # a version ends where none begins
        (("e", "x"), Closed("01")),  # not in the state
    ]
    assert history_differences(closed, state) == [
        "c/a: the newest closed version ends at sequencer 02, the state row begins at 05",
        "c/b: 2 open versions in the history table",
        "d/c: 1 of its versions end where no version begins",
        "e/x: closed versions in the history, no row in the state",
    ]


def test_a_history_behind_the_state_is_told_by_the_versions_each_applied() -> None:
    assert behind(3, 4) == (3, 4)
    assert behind(None, 0) == (-1, 0)  # the job never wrote the history
    assert behind(4, 4) is None and behind(5, 4) is None
    assert behind(None, None) is None and behind(2, None) is None  # not the job's tables
