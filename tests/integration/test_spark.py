"""Real hosts with `--observer spark` (an embedded local Spark each): the change log holds every
event exactly once for any Parquet reader, also after a host is killed between a Spark write and
its checkpoints."""

from __future__ import annotations

import itertools
import signal
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from processor.changefeed.emulator.azurite import Azurite
from tests.cluster import Cluster, Table, all_caught_up
from tests.helpers import emulate_afresh

_processors = itertools.count()
pytestmark = pytest.mark.timeout(300)


@dataclass
class Feed:
    conn: str
    ids: set[str]


@pytest.fixture(scope="module")
async def feed(azurite: Azurite) -> Feed:
    conn = azurite.connection_string
    records = await emulate_afresh(
        conn, seed=21, segments=3, events_per_segment=1500, shards=(4, 6, 4)
    )
    return Feed(conn, {str(r["id"]) for r in records})


@pytest.fixture
async def cluster(feed: Feed, tmp_path: Path) -> AsyncIterator[Cluster]:
    args = (
        "--lease-expiration", "4",
        "--poll-interval", "0.5",
        "--observer", "spark",
        "--output", str(tmp_path / "tables"),
        "--spark-master", "local[1]",
    )  # fmt: skip
    c = Cluster(feed.conn, f"spark{next(_processors)}", tmp_path, args=args)
    try:
        yield c
    finally:
        c.kill_all()


def change_log_ids(cluster: Cluster) -> Counter[str]:
    """The ids as a plain Parquet reader (pyarrow, hive partitions) sees them."""
    data = ds.dataset(cluster.workdir / "tables" / "changes", format="parquet", partitioning="hive")
    return Counter(data.to_table(columns=["id"]).column("id").to_pylist())


async def caught_up(cluster: Cluster) -> None:
    async with cluster.store() as store:
        table = Table(await store.open())
        await table.until(all_caught_up, within_s=180, what="every lease caught up")


def assert_exactly_once(cluster: Cluster, feed: Feed) -> None:
    ids = change_log_ids(cluster)
    assert set(ids) == feed.ids, f"{len(feed.ids - set(ids))} missing"
    twice = [i for i, n in ids.items() if n > 1]
    assert not twice, f"{len(twice)} ids twice in the change log"


async def test_three_hosts_write_each_event_once(cluster: Cluster, feed: Feed) -> None:
    for name in ("h1", "h2", "h3"):
        cluster.start(name)
    await caught_up(cluster)
    assert cluster.stop_all() == {"h1": 0, "h2": 0, "h3": 0}
    assert_exactly_once(cluster, feed)
    schema = ds.dataset(cluster.workdir / "tables" / "changes", partitioning="hive").schema
    assert str(schema.field("event_time").type) == "timestamp[us, tz=UTC]"


async def test_a_host_killed_after_a_write_before_its_checkpoints(
    cluster: Cluster, feed: Feed
) -> None:
    cluster.start("h2", CFP_TEST_SPARK_PAUSE_AFTER_PUBLISH_S="60")
    # h2 published a Spark write and now waits before checkpointing it
    await cluster.logged("h2", "spark.published", within_s=60)
    cluster.signal("h2", signal.SIGKILL)
    cluster.wait("h2")
    cluster.start("h1")  # takes h2's leases after expiry and replays from their checkpoints
    cluster.start("h3")
    await caught_up(cluster)
    skipped = sum(
        e.get("rows", 0)
        for name in ("h1", "h3")
        for e in cluster.log_events(name)
        if e.get("event") == "spark.replay_skipped"
    )
    assert skipped > 0, "the replay of h2's unconfirmed rows was not recognised"
    assert cluster.stop_all()["h1"] == 0
    assert_exactly_once(cluster, feed)
