"""The state with hints, as a model: once the feed has delivered every record, each blob whose
hints it confirmed shows exactly what the feed alone gives, and a blob with an unconfirmed hint
newer than its feed shows that hint, provisional, whatever hints were dropped, repeated, late
or out of order. Without the sequencer guard the same property fails. (The real MERGEs against
this model: `tests/integration/test_delta_tables.py`.)"""

from __future__ import annotations

import json

from hypothesis import find, given

from observers.builtin.spark.state.hint_run import HINTS_META_KEY, hints_applied, hints_metadata
from observers.builtin.spark.state.state_job import applied_version
from tests.hint_model import Scenario, run, scenarios


@given(scenarios)
def test_the_feed_decides_and_an_unconfirmed_hint_stays_provisional(s: Scenario) -> None:
    assert run(s.passes) == s.expected()


@given(scenarios)
def test_a_run_may_take_its_hints_before_or_after_its_feed_records(s: Scenario) -> None:
    """A run folds its hints first (they wait for no MERGE of the feed's); the other order,
    an earlier cfp's, ends in the same state."""
    assert run(s.passes, hints_first=False) == run(s.passes) == s.expected()


@given(scenarios)
def test_replaying_every_hint_again_changes_nothing(s: Scenario) -> None:
    assert run([*s.passes, ([], s.hints)]) == run(s.passes)


def test_without_the_guard_the_property_fails() -> None:
    broken = find(scenarios, lambda s: run(s.passes, guard=False) != s.expected())
    assert run(broken.passes) == broken.expected()  # the guard mends that very scenario


def test_a_hints_commit_records_its_version_apart_from_the_change_logs() -> None:
    history = [
        {"userMetadata": hints_metadata(7)},
        {"userMetadata": json.dumps({"cfpChangesVersion": 3})},
        {"userMetadata": None},
    ]
    assert hints_applied(history) == 7
    assert applied_version(history) == 3  # the feed's version is not taken from a hints commit
    assert json.loads(hints_metadata(2)) == {HINTS_META_KEY: 2}
