"""The state job's tables with embedded Spark on a local folder: the state MERGE gives the plain
model's rows whatever the order, cut and replays of the changes, and so does the history's; the
state job records what it applied, skips a stale run, and reads the whole change log when the
commits it needs were vacuumed.

A file of its own beside test_delta_tables.py: each of its two long tests takes two minutes or
more, and test files are what the test run spreads over its workers."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from observers.spark.changelog import ChangeLog
from observers.spark.fence import LeaseFence
from observers.spark.history import as_versions
from observers.spark.history_run import Replaced, apply_history
from observers.spark.output import Output, parse_output
from observers.spark.session import SparkOptions, new_session
from observers.spark.sql import table_ref
from observers.spark.state_job import StateJob, newest_version, optimize
from observers.spark.tables import create_tables
from processor.admin.verify import read_state
from tests.delta_state import (
    Scenario,
    all_versions,
    assert_history_ends_in_the_state,
    merge_both,
    merge_state,
    scenarios,
    state_rows,
)
from tests.state_model import (
    Event,
    changes,
    history_model,
    model,
    seen,
    seen_history,
)

pytestmark = pytest.mark.timeout(600)


def tables(tmp_path: Path, spark: Any) -> Output:
    output = parse_output(str(tmp_path / "tables"))
    create_tables(spark, output)
    return output


def test_a_state_commit_between_a_runs_two_writes_loses_no_version(
    tmp_path: Path, delta_spark: Any
) -> None:
    """Another run's state commit lands between a run's state MERGE and its history write (a
    paused holder and the next one, under the chaos suite): the history's fold reads the state
    as of the run's own commit, so the version that commit replaced is not lost."""
    output = parse_output(str(tmp_path / "tables"))
    create_tables(delta_spark, output)
    events = [Event(0, 1, "created", 1), Event(0, 3, "props", 3)]
    merge_both(delta_spark, output, changes(events))

    def history_of(rows: pa.Table, first: int, state_at: int, *, alone: bool) -> None:
        delta_spark.createDataFrame(rows).createOrReplaceTempView("cfp_test_changes")
        apply_history(
            delta_spark, history_uri=output.history, state_uri=output.state,
            changes_view="cfp_test_changes",
            replaced=Replaced(first, state_at, alone=alone) if first <= state_at else None,
            state_at=state_at, write=lambda statement, _: list(delta_spark.sql(statement).collect()),
        )  # fmt: skip

    late = changes([Event(0, 2, "props", 2)])  # older than the blob's row: the MERGE path
    before = newest_version(delta_spark, output.state)
    merge_state(delta_spark, output.state, late)
    ours = newest_version(delta_spark, output.state)
    newer = changes([Event(0, 4, "props", 4)])
    merge_state(delta_spark, output.state, newer)  # the other run's commit, meanwhile
    history_of(late, before + 1, ours, alone=False)
    history_of(newer, ours + 1, newest_version(delta_spark, output.state), alone=True)
    events += [Event(0, 2, "props", 2), Event(0, 4, "props", 4)]
    versions = all_versions(delta_spark, output)
    assert seen_history(versions) == history_model(events)


@settings(
    max_examples=2,  # a Spark MERGE per table and pass: each example costs a minute here
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: Spark is slow
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(scenarios, min_size=24, max_size=24))
def test_the_state_and_history_merges_give_the_models_whatever_the_order_cut_and_replays(
    tmp_path: Path, delta_spark: Any, batch: list[Scenario]
) -> None:
    """Twenty-four scenarios at once, each on blobs of its own (containers prefixed with its number),
    so that one MERGE per table and pass serves them all. Each scenario's events: the oldest
    (a random share) in order in the first two passes, which the history appends (its fast
    path); the rest and replays of any, shuffled and cut into up to two more passes, which it
    MERGEs. The history's open versions are the state."""
    output = parse_output(str(tmp_path / f"tables-{uuid.uuid4().hex}"))  # one per example
    create_tables(delta_spark, output)
    passes: list[list[pa.Table]] = [[] for _ in range(4)]
    expected: dict[tuple[str, str], Any] = {}
    expected_history: dict[tuple[str, str, str], Any] = {}
    for n, (events, rng, cuts) in enumerate(batch):
        prefix = f"s{n}-"
        in_order = sorted(events, key=lambda e: e.seq)
        first = rng.randint(1, len(events) // 3)  # (busy feeds: at least 12 events)
        second = rng.randint(first + 1, 2 * len(events) // 3)
        rest = in_order[second:] + rng.sample(events, k=len(events) // 2)  # some come twice
        rng.shuffle(rest)
        cut = rng.randint(0, len(rest)) if cuts > 1 else len(rest)
        for k, part in enumerate(
            (in_order[:first], in_order[first:second], rest[:cut], rest[cut:])
        ):
            passes[k].append(changes(part, container_prefix=prefix))
        expected.update(model(events, prefix))
        expected_history.update(history_model(events, prefix))
    for k, tables_of_pass in enumerate(passes):
        wrote: list[str] = []
        merge_both(delta_spark, output, pa.concat_tables(tables_of_pass), wrote)
        if k < 2:  # in order, nothing older than a blob's state row: appended
            assert [w.split()[0] for w in wrote] == ["INSERT"], wrote
    before = state_rows(delta_spark, output.state)
    assert seen(before) == expected
    versions = all_versions(delta_spark, output)
    assert seen_history(versions) == expected_history
    assert_history_ends_in_the_state(versions, before)
    everything = pa.concat_tables(
        [changes(events, container_prefix=f"s{n}-") for n, (events, _, _) in enumerate(batch)]
    )
    [again], written = merge_both(delta_spark, output, everything)  # a full replay
    [again_history] = written.rows
    assert (again["num_updated_rows"], again["num_inserted_rows"]) == (0, 0)
    assert (again_history["num_updated_rows"], again_history["num_inserted_rows"]) == (0, 0)
    live, tombstones = read_state(output.state, {})  # delta-rs, deletion vectors and all
    assert len(live) + tombstones == len(expected)
    assert {(b.container, b.name) for b in live} == {
        k for k, v in expected.items() if not v["deleted"]
    }


def test_the_state_job_records_what_it_applied_and_a_stale_run_changes_nothing(
    tmp_path: Path, delta_spark: Any
) -> None:
    output = tables(tmp_path, delta_spark)
    options = SparkOptions(output, master="local[2]")
    # appends of a lease taken as synced: one change-log version per commit (no fence's),
    # since this test counts them (the fence has tests of its own)
    log, fence = ChangeLog(output.changes), LeaseFence("00", "t/00", 1, synced=True, checked=True)
    feed = [Event(b, s, "created" if s == 1 else "props", s) for s in (1, 2, 3) for b in range(3)]

    def commit(events: list[Event], start: int) -> None:
        table = changes(events)
        positions = pa.array([f"p{start + i:06d}" for i in range(table.num_rows)])
        log.write(delta_spark, fence, table.set_column(18, "position", positions))

    def job(*, history: bool = True) -> StateJob:
        session = new_session(delta_spark, options)
        return StateJob(session, changes=output.changes, state_table=output.state,
                        history_table=output.history if history else None,
                        optimize_every_s=3600)  # fmt: skip

    def assert_tables(events: list[Event]) -> None:
        state = state_rows(delta_spark, output.state)
        versions = all_versions(delta_spark, output)
        assert seen(state) == model(events)
        assert seen_history(versions) == history_model(events)
        assert_history_ends_in_the_state(versions, state)

    commit(feed[:3], 0)
    commit(feed[3:6], 3)
    first = job().run_once()
    assert first.whole and first.applied == first.latest == 2 and first.inserted == 3
    assert first.history == "merged"  # a rebuild folds the whole log
    assert job().applied_version() == 2  # what the next holder reads back
    commit(feed[6:], 6)
    zombie = job()  # a holder that paused before applying version 3
    second = job().run_once()
    assert (second.applied, second.updated, second.whole) == (3, 3, False)
    assert second.history == "appended"  # in step, every event newer than its blob's row
    assert zombie._merge(1, 2, rebuild=False) == (None, "")  # Delta skips the stale version
    assert_tables(feed)

    # a run that stopped between its two commits: the state holds version 4, the history not
    feed.append(Event(1, 4, "tier", 7))
    commit(feed[-1:], 9)
    assert job(history=False).run_once().applied == 4
    behind = job()
    assert behind.applied_version() == 3  # the older of the two tables
    caught_up = behind.run_once()
    assert (caught_up.applied, caught_up.history) == (4, "merged")  # not in step
    assert_tables(feed)

    commit([Event(0, 5, "deleted", 0)], 10)  # version 5, then compacted and vacuumed away
    delta_spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        optimize(delta_spark, output.changes)
        delta_spark.sql(f"VACUUM {table_ref(output.changes)} RETAIN 0 HOURS").collect()
    finally:
        delta_spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    third = job().run_once()  # the rows of version 5 are gone from its files: read them all
    assert third.whole and third.is_caught_up
    feed.append(Event(0, 5, "deleted", 0))
    assert_tables(feed)

    # tables an older cfp made: no change data feed on the state; open versions in the history
    feed_off = "'delta.enableChangeDataFeed' = 'false'"
    delta_spark.sql(f"ALTER TABLE {table_ref(output.state)} SET TBLPROPERTIES ({feed_off})")
    delta_spark.sql(
        f"INSERT INTO {table_ref(output.history)} {as_versions(table_ref(output.state))}"
    )
    feed += [Event(1, 6, "props", 3), Event(2, 6, "created", 4)]
    commit(feed[-2:], 11)
    upgraded = job().run_once()  # its first run brings the tables up to date
    assert upgraded.is_caught_up and upgraded.history == "appended"
    assert_tables(feed)
