"""Real hosts with `--observer spark`, each with an embedded local Spark, writing the Delta tables
into a local folder (the default, one command away): the same guarantees as on Spark Connect
(test_spark.py), in a module of its own so that `make test` runs it beside that one."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.helpers import Feed
from tests.spark_cluster import (
    SparkCluster,
    assert_exactly_once,
    assert_state_equals_the_account,
    assert_verify_finds_a_change_the_feed_lacks,
    caught_up,
    feed,
    spark_cluster,
)

pytestmark = pytest.mark.timeout(600)
__all__ = ["feed"]  # the module's fixture


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
    codes = cluster.stop_all(timeout=180)
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
    await cluster.logged("h1", "spark.opening", within_s=60)
    cluster.signal("h1", signal.SIGTERM)
    assert await asyncio.to_thread(cluster.wait, "h1", 60) == 0
    events = [e.get("event") for e in cluster.log_events("h1")]
    assert "host.stopped_while_starting" in events and "host.starting" not in events, events
    assert not (cluster.output.local / "changes" / "_delta_log").exists()
    async with cluster.store() as store:
        assert not [x for x in await store.list_leases() if x.owner], "a lease was taken"
