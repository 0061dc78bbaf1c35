"""The fenced change log on real Delta tables (embedded Spark, a local folder). Schedules of owners,
zombies paused mid-write (their Spark task held until a file appears) and woken before, between
or after the next owner's fence, floor read and appends, crashes between a commit and its
checkpoint, ambiguous commits and a lease table made anew (tests/fence_model.py) leave each
event in the change log exactly once, as delta-rs reads it. The same schedules run many more
times against a model of Delta's rules in tests/unit/observers/builtin/spark/changelog/test_fence_model.py.

And real hosts, each with an embedded Spark: one stopped with SIGSTOP while its own JVM holds
its write in flight is refused by Delta once the next owner has fenced its leases (the Spark
Connect case is in test_spark.py).

A module of its own: its JVMs run beside test_delta_tables.py's, on another worker."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from observers.builtin.spark.changelog.change_log import ChangeLog
from observers.builtin.spark.session.output import parse_output
from observers.builtin.spark.session.session import SparkOptions, new_session, open_session
from observers.builtin.spark.tables import create_tables
from tests.fence_model import Gate, Run, Step, _Frame, assert_played, schedules
from tests.helpers import Feed
from tests.jvms import lasting_jvm
from tests.spark_cluster import (
    SparkCluster,
    assert_a_zombie_write_in_flight_is_refused,
    feed,
    spark_cluster,
)

pytestmark = pytest.mark.timeout(900)
__all__ = ["feed"]  # the hosts' feed, a fixture


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with lasting_jvm():
        session = open_session(SparkOptions(parse_output("/nowhere"), master="local[2]"))
    yield session
    session.stop()


class FileGate(Gate):
    """A write held inside Spark: its task marks that it runs, then polls for a file."""

    def __init__(self, folder: Path) -> None:
        name = uuid.uuid4().hex
        self.mark, self.flag = folder / f"held-{name}", folder / f"go-{name}"

    def hold(self, frame: Any) -> Any:
        mark, flag = str(self.mark), str(self.flag)

        def held(batches: Any) -> Any:
            with open(mark, "w"):
                pass
            while not os.path.exists(flag):
                time.sleep(0.05)
            yield from batches

        return _Frame(frame.session, frame.real.mapInArrow(held, frame.real.schema))

    def started(self) -> bool:
        return self.mark.exists()

    def release(self) -> None:
        self.flag.touch()


def positions(uri: str) -> list[str]:
    """The change log's positions as delta-rs (an independent reader) sees them."""
    found = QueryBuilder().register("c", DeltaTable(uri)).execute("SELECT position FROM c")
    return [str(p) for p in pa.table(found).column("position").to_pylist()]


ZOMBIE = ("write", "a", 3, (("take", "b"), ("write", "b", 4, (), 0)))


@settings(
    max_examples=2,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: each run is seconds of Spark
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# woken before the next owner's fence: floored; after the fence, before the floor read: refused;
# after the floor read, before the append: refused
@example(schedule=[("take", "a"), (*ZOMBIE, 1)], ahead=False)
@example(schedule=[("take", "a"), (*ZOMBIE, 2)], ahead=False)
@example(schedule=[("take", "a"), (*ZOMBIE, 3)], ahead=False)
@example(schedule=[("take", "a"), ("write", "a", 5, (), 0), ("ambiguous", "a", 4)], ahead=True)
@given(schedule=schedules(max_size=6), ahead=st.booleans())
def test_each_event_once_on_real_delta_whoever_writes_and_whenever(
    tmp_path_factory: pytest.TempPathFactory, spark: Any, schedule: list[Step], ahead: bool
) -> None:
    """`ahead`: owners fence when they take the lease (as the Spark sink does), else at their
    first write."""
    folder = tmp_path_factory.mktemp("fenced")
    output = parse_output(str(folder / "tables"))
    create_tables(spark, output, history=False)
    options = SparkOptions(output, master="local[2]")
    sessions: dict[str, Any] = {}

    def session_of(host: str) -> Any:
        if host not in sessions:
            sessions[host] = new_session(spark, options)
        return sessions[host]

    run = Run(ChangeLog(output.changes), session_of, lambda: FileGate(folder), "p", ahead)
    assert_played(run, schedule, lambda: positions(output.changes))
    if schedule[1:] == [(*ZOMBIE, 2)] or schedule[1:] == [(*ZOMBIE, 3)]:
        assert run.outcomes["LeaseFenced"] == 1, run.outcomes  # Delta refused the zombie


@pytest.fixture
async def cluster(feed: Feed, tmp_path: Path) -> AsyncIterator[SparkCluster]:
    async with spark_cluster(feed, tmp_path, None) as c:
        yield c


async def test_a_zombie_write_in_flight_across_the_fence_is_refused(
    cluster: SparkCluster, feed: Feed, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """h1 is stopped while its own JVM holds its write open (the JVM runs on; the test holds the
    task), h2 fences and writes every lease; the held write's commit is refused."""
    await assert_a_zombie_write_in_flight_is_refused(cluster, feed, tmp_path / "go", request)
