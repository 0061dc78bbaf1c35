"""Helpers of the tests of the state job's tables (tests/integration/test_delta_state_job.py):
a state job's two writes on tables in step, and the tables read back as users query them."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from observers.spark.history import every_version
from observers.spark.history_run import Replaced, apply_history
from observers.spark.sql import table_ref
from observers.spark.state import merge_statement, newest_per_blob
from tests.state_model import (
    Event,
    busy_feeds,
)


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


def all_versions(spark: Any, output: Any) -> list[dict[str, Any]]:
    """The closed versions and the open ones (the state's rows), as users query them."""
    return spark.sql(every_version(output.history, output.state)).toArrow().to_pylist()


def state_rows(spark: Any, uri: str) -> list[dict[str, Any]]:
    table = spark.sql(f"SELECT * FROM {table_ref(uri)}").toArrow()
    return table.to_pylist()


Scenario = tuple[list[Event], random.Random, int]


scenarios = st.tuples(busy_feeds, st.randoms(use_true_random=False), st.integers(1, 4))


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
