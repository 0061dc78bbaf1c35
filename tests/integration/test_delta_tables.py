"""The Delta tables with embedded Spark on a local folder (the default, one command away): the
state MERGE gives the plain model's rows whatever the order, cut and replays of the changes; the
state job records what it applied, skips a stale run, and reads the whole change log when the
commits it needs were vacuumed; with hints, the MERGEs give the hint model's state and the state
job folds the hints once; real hosts, each with its own embedded Spark, give the same
guarantees as on Spark Connect (test_spark.py). The change log's own writes are tested in
test_fenced_change_log.py.

Its tests run one after the other on one worker and share one session, while test_spark.py's
Spark Connect server runs on another."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from azure.core.exceptions import ResourceNotFoundError
from deltalake import DeltaTable, QueryBuilder
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from observers.builtin.spark.changelog.change_log import ChangeLog
from observers.builtin.spark.changelog.fence import LeaseFence
from observers.builtin.spark.session.output import Output, parse_output
from observers.builtin.spark.session.session import SparkOptions, new_session
from observers.builtin.spark.sql import table_ref
from observers.builtin.spark.state.hint_run import HintsKept, Unconfirmed
from observers.builtin.spark.state.history import as_versions, every_version
from observers.builtin.spark.state.history_run import Replaced, apply_history
from observers.builtin.spark.state.state_job import (
    StateJob,
    applied_version,
    newest_version,
    optimize,
)
from observers.builtin.spark.state.state_table import (
    FEED_CANDIDATE_EXTRA,
    HINT_CANDIDATE_EXTRA,
    hint_merge_statement,
    hinted_events,
    merge_statement,
    newest_per_blob,
)
from observers.builtin.spark.tables import create_tables, with_hint_columns
from observers.changes import records_table
from observers.origin import Origin
from processor.admin.history_check import HistoryCheck, check_history
from processor.admin.verify import read_state
from tests.helpers import Feed, run_cfp
from tests.hint_model import Change, hint_rows
from tests.hint_model import Scenario as HintScenario
from tests.hint_model import feed_rows as hint_feed_rows
from tests.hint_model import run as hint_run
from tests.hint_model import scenarios as hint_scenarios
from tests.hint_model import seen as hint_seen
from tests.jvms import install_archive, maps_file
from tests.spark_cluster import (
    SparkCluster,
    assert_exactly_once,
    assert_state_equals_the_account,
    assert_verify_finds_a_change_the_feed_lacks,
    caught_up,
    feed,
    spark_cluster,
)
from tests.state_model import (
    SEGMENT,
    Event,
    busy_feeds,
    changes,
    history_model,
    model,
    seen,
    seen_history,
)

# embedded JVMs beside two other test workers' on two cores: two hosts each opening a session
# took 125 and 160 s in a fresh-clone run, and the two-host case 536 s of its old 600 s
pytestmark = pytest.mark.timeout(900)
__all__ = ["feed"]  # the embedded hosts' feed, a fixture of this module


@pytest.fixture
def made_containers(azurite: Any) -> Iterator[list[str]]:
    """Containers a test makes in the shared Azurite account, deleted afterwards: other modules
    compare that account's listing with its change feed."""
    made: list[str] = []
    yield made
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(azurite.connection_string)
    for name in made:
        with contextlib.suppress(ResourceNotFoundError):
            service.delete_container(name)


def rows(lease: str, keys: list[str]) -> pa.Table:
    records = [
        {
            "subject": f"/blobServices/default/containers/c/blobs/{lease}/{k}",
            "eventType": "BlobCreated",
            "eventTime": "2026-01-01T01:00:00Z",
            "id": f"{lease}|{k}",
            "data": {"sequencer": f"{i:016x}"},
        }
        for i, k in enumerate(keys)
    ]
    return records_table(records, keys, Origin(lease, SEGMENT))


def tables(tmp_path: Path, spark: Any) -> Output:
    output = parse_output(str(tmp_path / "tables"))
    create_tables(spark, output)
    return output


def delta_rs_ids(uri: str) -> Counter[str]:
    """The change log's ids as delta-rs (an independent reader) sees them."""
    found = QueryBuilder().register("changes", DeltaTable(uri)).execute("SELECT id FROM changes")
    return Counter(pa.table(found).column("id").cast(pa.string()).to_pylist())


def merge_state(spark: Any, state_uri: str, change_rows: pa.Table) -> Any:
    spark.createDataFrame(change_rows).createOrReplaceTempView("cfp_test_changes")
    spark.sql(newest_per_blob("cfp_test_changes")).createOrReplaceTempView("cfp_test_source")
    return spark.sql(merge_statement(state_uri, "cfp_test_source")).collect()


def merge_both(
    spark: Any, output: Any, change_rows: pa.Table, wrote: list[str] | None = None
) -> tuple[Any, Any]:
    """A state job run's two writes on tables in step: the state's MERGE, then the history's
    share of it (from the state commit that MERGE made, if it made one). The statements the
    history's write ran go to `wrote`."""

    def latest() -> int:
        return int(
            spark.sql(f"DESCRIBE HISTORY {table_ref(output.state)} LIMIT 1").collect()[0]["version"]
        )

    def write(statement: str, _retry: bool) -> list[Any]:
        (wrote if wrote is not None else []).append(statement)
        return list(spark.sql(statement).collect())

    before = latest()
    state_result = merge_state(spark, output.state, change_rows)
    after = latest()
    spark.createDataFrame(change_rows).createOrReplaceTempView("cfp_test_changes")
    return state_result, apply_history(
        spark,
        history_uri=output.history,
        state_uri=output.state,
        changes_view="cfp_test_changes",
        replaced=Replaced(after, after, alone=True) if after > before else None,
        state_at=after,
        write=write,
    )


def test_an_embedded_sessions_jvm_maps_the_class_archive_make_install_made(
    delta_spark: Any,
) -> None:
    archive = install_archive()
    pid = delta_spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    assert maps_file(pid, archive), f"the embedded session's JVM ({pid}) has not mapped {archive}"


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


def all_versions(spark: Any, output: Any) -> list[dict[str, Any]]:
    """The closed versions and the open ones (the state's rows), as users query them."""
    return spark.sql(every_version(output.history, output.state)).toArrow().to_pylist()


def state_rows(spark: Any, uri: str) -> list[dict[str, Any]]:
    table = spark.sql(f"SELECT * FROM {table_ref(uri)}").toArrow()
    return table.to_pylist()


Scenario = tuple[list[Event], random.Random, int]
# at least a dozen events each: hypothesis tries the simplest example first (no event at all)
scenarios = st.tuples(busy_feeds, st.randoms(use_true_random=False), st.integers(1, 4))


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
    read = read_state(output.state, {})  # delta-rs, deletion vectors and all
    live, tombstones = read.blobs, read.tombstones
    assert len(live) + tombstones == len(expected)
    assert {(b.container, b.name) for b in live} == {
        k for k, v in expected.items() if not v["deleted"]
    }


def assert_history_ends_in_the_state(
    versions: list[dict[str, Any]], state: list[dict[str, Any]]
) -> None:
    """Each blob's open version is its state row."""
    open_versions = {(v["container"], v["blob"]): v for v in versions if v["valid_to"] is None}
    assert open_versions.keys() == {(r["container"], r["blob"]) for r in state}
    for r in state:
        v = open_versions[(r["container"], r["blob"])]
        assert v["valid_from_sequencer"] == r["sequencer"] and v["valid_from"] == r["event_time"]
        for column in ("deleted", "etag", "content_length", "tier", "tags", "tier_sequencer"):
            assert v[column] == r[column], column


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
    lagging = check_history(
        output.history, output.state, {}, applied=applied_version
    )  # what `cfp verify` reports
    assert lagging is not None and lagging.differences and lagging.behind == (3, 4), lagging
    behind = job()
    assert behind.applied_version() == 3  # the older of the two tables
    caught_up = behind.run_once()
    assert (caught_up.applied, caught_up.history) == (4, "merged")  # not in step
    assert_tables(feed)
    assert check_history(output.history, output.state, {}, applied=applied_version) == HistoryCheck(
        []
    )

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

    # (`cfp optimize` compacts the three tables: tests/integration/test_spark.py, on Spark Connect)


def _hint_passes(spark: Any, output: Output, passes: list[tuple[pa.Table, pa.Table]]) -> None:
    """Each pass as a state job run with hints makes it: the hints' rows merged (creates and
    deletes only), then the feed's, each under its guard."""
    for n, (fed, hinted) in enumerate(passes):
        spark.createDataFrame(hinted).createOrReplaceTempView(f"cfp_t_hints{n}")
        spark.sql(hinted_events(f"cfp_t_hints{n}")).createOrReplaceTempView(f"cfp_t_taken{n}")
        spark.sql(
            newest_per_blob(f"cfp_t_taken{n}", extra=HINT_CANDIDATE_EXTRA)
        ).createOrReplaceTempView(f"cfp_t_hsrc{n}")
        spark.sql(hint_merge_statement(output.state, f"cfp_t_hsrc{n}")).collect()
        spark.createDataFrame(fed).createOrReplaceTempView(f"cfp_t_feed{n}")
        spark.sql(
            newest_per_blob(f"cfp_t_feed{n}", extra=FEED_CANDIDATE_EXTRA)
        ).createOrReplaceTempView(f"cfp_t_fsrc{n}")
        spark.sql(merge_statement(output.state, f"cfp_t_fsrc{n}", hints=True)).collect()


@settings(
    max_examples=2,  # Spark MERGEs: each example costs tens of seconds here
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(hint_scenarios, min_size=24, max_size=24))
def test_the_state_merges_with_hints_give_the_models_state(
    tmp_path: Path, delta_spark: Any, batch: list[HintScenario]
) -> None:
    """Twenty-four scenarios at once on blobs of their own (containers prefixed with their
    number), one feed MERGE and one hints MERGE per pass serving them all: hints dropped,
    repeated, late, out of order, unconfirmed, some with sequencers the feed's cannot be
    compared with. Once the feed is in, the state is the model's: the feed's own, but for a
    blob whose unconfirmed hint is newer, shown provisional. Replaying every hint changes no
    row; delta-rs counts the provisional rows."""
    output = parse_output(str(tmp_path / f"tables-{uuid.uuid4().hex}"))
    create_tables(delta_spark, output, history=False, hints=True)
    passes: list[tuple[list[pa.Table], list[pa.Table]]] = [([], []) for _ in range(4)]
    for n, s in enumerate(batch):
        for k, (feed_part, hint_part) in enumerate(s.passes):
            passes[k][0].append(hint_feed_rows(feed_part, f"s{n}-"))
            passes[k][1].append(hint_rows(hint_part, f"s{n}-"))
    _hint_passes(
        delta_spark,
        output,
        [(pa.concat_tables(f), pa.concat_tables(h)) for f, h in passes if f or h],
    )
    state = state_rows(delta_spark, output.state)
    for n, s in enumerate(batch):
        assert hint_seen(state, f"s{n}-") == hint_run(s.passes) == s.expected(), n
    every_hint = pa.concat_tables([hint_rows(s.hints, f"s{n}-") for n, s in enumerate(batch)])
    delta_spark.createDataFrame(every_hint).createOrReplaceTempView("cfp_t_again")
    delta_spark.sql(hinted_events("cfp_t_again")).createOrReplaceTempView("cfp_t_again_taken")
    delta_spark.sql(
        newest_per_blob("cfp_t_again_taken", extra=HINT_CANDIDATE_EXTRA)
    ).createOrReplaceTempView("cfp_t_again_src")
    [again] = delta_spark.sql(hint_merge_statement(output.state, "cfp_t_again_src")).collect()
    assert (again["num_updated_rows"], again["num_inserted_rows"]) == (0, 0)
    assert read_state(output.state, {}).provisional == sum(r["provisional"] for r in state)


class _BeatenToIt:
    """A session whose every ALTER TABLE is run first by "another host" (the real session),
    between our look at the schema and our own ALTER; ours then fails as CI saw it fail on abfs
    through Spark Connect (a local Delta table says "already exists" instead)."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def sql(self, statement: str) -> Any:
        if statement.startswith("ALTER TABLE"):
            self.session.sql(statement).collect()
            raise RuntimeError(
                "[DELTA_DUPLICATE_COLUMNS_FOUND.ADDING_COLUMNS] Found duplicate column(s): "
                "hinted_at, provisional."
            )
        return self.session.sql(statement)


def test_hint_columns_added_by_another_host_first_are_no_error(
    tmp_path: Path, delta_spark: Any
) -> None:
    """Two hosts opening an older state table with hints at once: the one whose ALTER comes
    second (Delta: duplicate columns) finds the columns there and goes on (CI saw a host fail
    permanently on it)."""
    output = parse_output(str(tmp_path / "tables"))
    create_tables(delta_spark, output, history=False, hints=False)
    with_hint_columns(_BeatenToIt(delta_spark), output.state)
    names = [
        r["col_name"] for r in delta_spark.sql(f"DESCRIBE {table_ref(output.state)}").collect()
    ]
    assert (names.count("provisional"), names.count("hinted_at")) == (1, 1)


def test_the_state_job_folds_hints_once_and_a_stale_run_changes_nothing(
    tmp_path: Path, delta_spark: Any
) -> None:
    """With hints: a run applies the hints appended since its last run, then the feed's new
    rows, recording each table's version; a hint confirmed by the feed stops being provisional;
    a zombie's stale hints MERGE is skipped; the provisional rows are counted. A holder that
    stays folds the change log only once `changes_every_s` has passed, or in its final run."""
    output = parse_output(str(tmp_path / "tables"))
    create_tables(delta_spark, output, history=False, hints=True)
    options = SparkOptions(output, master="local[2]")
    log, fence = ChangeLog(output.changes), LeaseFence("00", "t/00", 1, synced=True, checked=True)

    def job() -> StateJob:
        return StateJob(
            new_session(delta_spark, options), changes=output.changes, state_table=output.state,
            optimize_every_s=3600, hints=HintsKept(output.hints, confirm_within_s=0.0),
        )  # fmt: skip

    def hint(changes: list[Change]) -> None:
        delta_spark.createDataFrame(hint_rows(changes, "")).write.format("delta").mode(
            "append"
        ).save(output.hints)

    created, deleted = Change(0, 5, "created", 3), Change(1, 8, "deleted", 0)
    hint([created, deleted, created])  # hints version 1, ahead of the feed
    first = job().run_once()
    assert first.hints is not None and first.hints.applied == 1
    assert (first.hints.inserted, first.unconfirmed) == (2, Unconfirmed(2, 2))
    state = {r["blob"]: r for r in state_rows(delta_spark, output.state)}
    assert state["a.txt"]["provisional"] and state["dir/b c"]["deleted"]
    zombie = job()
    assert zombie.hints is not None and zombie.hints.applied() == 1
    log.write(delta_spark, fence, hint_feed_rows([Change(0, 2, "props", 1), created], ""))
    second = job().run_once()  # the feed confirms the create; its older record changes nothing
    assert second.applied == 1 and second.hints is not None and second.hints.applied == 1
    state = {r["blob"]: r for r in state_rows(delta_spark, output.state)}
    assert not state["a.txt"]["provisional"] and state["a.txt"]["sequencer"] == created.sequencer
    assert state["dir/b c"]["provisional"]  # never confirmed
    hint([Change(0, 3, "deleted", 0)])  # late: older than the row
    third = job().run_once()
    assert third.hints is not None and (third.hints.applied, third.hints.updated) == (2, 0)
    stale = zombie.hints._merge(0, 1, 2)  # a zombie's run of hints version 1
    assert stale.skipped
    assert read_state(output.state, {}).provisional == 1
    # a steady holder folds the change log only every --state-interval; hints every run
    steady = StateJob(
        new_session(delta_spark, options), changes=output.changes, state_table=output.state,
        optimize_every_s=3600,
        hints=HintsKept(output.hints, confirm_within_s=0.0, changes_every_s=3600),
    )  # fmt: skip

    def fed(lease: str, change: Change) -> None:  # a commit of a lease of its own
        lease_fence = LeaseFence(lease, f"t/{lease}", 1, synced=True, checked=True)
        log.write(delta_spark, lease_fence, hint_feed_rows([change], ""))

    fed("01", Change(3, 4, "created", 2))  # change log version 2
    assert steady.run_once().applied == 2  # new rows: folded at once, then not for a while
    latest = Change(2, 9, "created", 4)
    fed("02", latest)
    hint([latest])
    between = steady.run_once()
    assert between.hints is not None and between.hints.inserted == 1
    assert (between.applied, between.latest, between.is_caught_up) == (2, 3, False)
    final = steady.run_once(final=True)
    assert (final.applied, final.is_caught_up) == (3, True)
    state = {(r["container"], r["blob"]): r for r in state_rows(delta_spark, output.state)}
    assert not state[("c2", "a.txt")]["provisional"]  # the feed confirmed it
    fed("03", Change(3, 11, "deleted", 0))  # change log version 4
    unreadable = StateJob(
        new_session(delta_spark, options), changes=output.changes, state_table=output.state,
        optimize_every_s=3600, hints=HintsKept(str(tmp_path / "no-hints"), 0.0, 3600),
    )  # fmt: skip
    with pytest.raises(Exception, match="no-hints"):  # raised once the feed's rows are in
        unreadable.run_once()
    assert unreadable.applied_version() == 4


def test_a_sas_reaches_the_tables_on_azurite_through_abfs(
    delta_spark: Any, azurite: Any, made_containers: list[str]
) -> None:
    """An account SAS instead of the key (as a connection string carries it): Spark writes
    through ABFS with it, and delta-rs reads with it."""
    from azure.storage.blob import (
        AccountSasPermissions,
        ResourceTypes,
        generate_account_sas,
    )

    from observers.builtin.spark.session.container import ensure_container
    from observers.builtin.spark.session.output import delta_rs_options
    from processor.connection import AZURITE_ACCOUNT, AZURITE_KEY, storage_access

    sas = generate_account_sas(
        AZURITE_ACCOUNT,
        AZURITE_KEY,
        resource_types=ResourceTypes(service=True, container=True, object=True),
        permission=AccountSasPermissions(
            read=True, write=True, delete=True, list=True, add=True, create=True
        ),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    conn = f"BlobEndpoint=http://127.0.0.1:{azurite.blob_port}/{AZURITE_ACCOUNT};SharedAccessSignature={sas}"
    access = storage_access(conn)
    assert access.sas and not access.key
    output = parse_output(
        f"abfs://cfp-sas@{AZURITE_ACCOUNT}.dfs.core.windows.net/t{uuid.uuid4().hex[:8]}"
    )
    made_containers.append(output.container)
    assert asyncio.run(ensure_container(output, access))  # as a host does before Spark
    assert not asyncio.run(ensure_container(output, access))  # made already: fine
    session = new_session(delta_spark, SparkOptions(output, access=access))
    create_tables(session, output)
    ChangeLog(output.changes).write(session, LeaseFence("00", "t/00", 1), rows("00", ["a", "b"]))
    table = DeltaTable(output.changes, storage_options=delta_rs_options(output, access))
    found = QueryBuilder().register("changes", table).execute("SELECT id FROM changes")
    assert sorted(pa.table(found).column("id").cast(pa.string()).to_pylist()) == ["00|a", "00|b"]


async def test_the_host_makes_the_output_container_or_says_why_it_cannot(
    azurite: Any, made_containers: list[str]
) -> None:
    """A container-scoped SAS may not make containers: fine when the container is there, a
    clear refusal naming it when not; an account nobody answers for is named too."""
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas
    from azure.storage.blob.aio import BlobServiceClient

    from observers.builtin.spark.session.container import ensure_container
    from observers.errors import PluginLoadError
    from processor.connection import AZURITE_ACCOUNT, AZURITE_KEY, storage_access

    endpoint = f"http://127.0.0.1:{azurite.blob_port}/{AZURITE_ACCOUNT}"

    def scoped(container: str) -> str:
        sas = generate_container_sas(
            AZURITE_ACCOUNT,
            container,
            account_key=AZURITE_KEY,
            permission=ContainerSasPermissions(read=True, write=True, list=True),
            expiry=datetime.now(UTC) + timedelta(hours=1),
        )
        return f"BlobEndpoint={endpoint};SharedAccessSignature={sas}"

    def output(container: str) -> Output:
        return parse_output(f"abfs://{container}@{AZURITE_ACCOUNT}.dfs.core.windows.net/t")

    made_containers.extend(["cfp-there", "cfp-absent", "cfp-any"])
    async with BlobServiceClient.from_connection_string(azurite.connection_string) as service:
        await service.create_container("cfp-there")
    assert not await ensure_container(output("cfp-there"), storage_access(scoped("cfp-there")))
    with pytest.raises(PluginLoadError) as refused:
        await ensure_container(output("cfp-absent"), storage_access(scoped("cfp-absent")))
    assert f"container 'cfp-absent' at {endpoint} does not exist" in str(refused.value)
    assert "(sas) may not make it" in str(refused.value)
    assert "sig=" not in str(refused.value)
    nobody = f"BlobEndpoint=http://127.0.0.1:1/{AZURITE_ACCOUNT};AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY}"
    with pytest.raises(
        PluginLoadError, match=r"cannot reach http://127\.0\.0\.1:1/devstoreaccount1"
    ):
        await ensure_container(output("cfp-any"), storage_access(nobody), patience_s=1)


def test_a_host_whose_output_cannot_be_made_exits_2_naming_it(azurite: Any) -> None:
    """A real `cfp run`: the output's container is missing and its SAS may not make it. The
    host stops at start with exit 2, before any Spark, and prints no secret."""
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    from processor.connection import AZURITE_ACCOUNT, AZURITE_KEY

    sas = generate_container_sas(
        AZURITE_ACCOUNT,
        "cfp-never",
        account_key=AZURITE_KEY,
        permission=ContainerSasPermissions(read=True, write=True, list=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    blob = f"http://127.0.0.1:{azurite.blob_port}/{AZURITE_ACCOUNT}"
    done = run_cfp(
        azurite.connection_string,
        "run", "--processor-name", f"noout{uuid.uuid4().hex[:6]}", "--http-port", "0",
        "--observer", "spark", "--until-caught-up",
        "--output", f"abfs://cfp-never@{AZURITE_ACCOUNT}.dfs.core.windows.net/t",
        "--output-connection-string", f"BlobEndpoint={blob};SharedAccessSignature={sas}",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"container 'cfp-never' at {blob} does not exist" in done.stderr
    assert "sig=" not in done.stdout + done.stderr and AZURITE_KEY not in done.stderr


@pytest.fixture
async def cluster(feed: Feed, tmp_path: Path) -> AsyncIterator[SparkCluster]:
    async with spark_cluster(feed, tmp_path, None) as c:
        yield c


async def test_hosts_write_each_event_once_and_the_state_equals_the_account(
    cluster: SparkCluster, feed: Feed, request: pytest.FixtureRequest
) -> None:
    """Two hosts with an embedded Spark each (two JVMs are what two cores carry in a reasonable
    time), caught up and then stopped with SIGTERM (the state job's holder runs it once more as
    it drains)."""
    names = ("h1", "h2")
    for name in names:
        cluster.start(name)
    await caught_up(cluster)
    codes = cluster.stop_all()
    assert codes == dict.fromkeys(names, 0)
    assert_exactly_once(cluster, feed, request)
    assert_state_equals_the_account(cluster)
    await assert_verify_finds_a_change_the_feed_lacks(cluster, feed)


async def test_sigterm_while_the_spark_session_opens_stops_the_host_at_once(
    cluster: SparkCluster,
) -> None:
    """Opening an embedded session and its tables takes 20 s alone here and over 80 s with four
    JVMs on two cores: a host told to stop meanwhile holds nothing yet, so it exits 0 without
    finishing the open (no lease taken, no table made)."""
    cluster.start("h1")
    await cluster.logged("h1", "spark.opening")
    cluster.signal("h1", signal.SIGTERM)
    assert await asyncio.to_thread(cluster.wait, "h1") == 0
    events = [e.get("event") for e in cluster.log_events("h1")]
    assert "host.stopped_while_starting" in events and "host.starting" not in events, events
    assert not (cluster.output.local / "changes" / "_delta_log").exists()
    async with cluster.store() as store:
        assert not [x for x in await store.list_leases() if x.owner], "a lease was taken"
