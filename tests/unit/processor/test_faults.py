"""The tests' fault-injection points: off unless their variable is set."""

from __future__ import annotations

import pytest

from observers.builtin.spark import faults as spark_faults
from observers.builtin.spark.faults import CommitPauses
from processor import faults


def test_every_point_is_off_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (faults.CLOCK_SKEW, spark_faults.PAUSE_AFTER_COMMIT, spark_faults.HOLD_WRITE_FILE):
        monkeypatch.delenv(name, raising=False)
    assert faults.clock_skew_s() == 0.0
    assert spark_faults.commit_pauses() == CommitPauses()


def test_set_points_are_read_as_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(faults.CLOCK_SKEW, "-300")
    monkeypatch.setenv(spark_faults.PAUSE_AFTER_COMMIT, "10")
    monkeypatch.setenv(spark_faults.HOLD_WRITE_FILE, "/tmp/go")
    assert faults.clock_skew_s() == -300.0
    assert spark_faults.commit_pauses() == CommitPauses(after_commit_s=10.0, hold_file="/tmp/go")
