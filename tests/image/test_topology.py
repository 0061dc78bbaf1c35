"""`make image-test`: the deployment the README recommends for more than one machine, all in
containers of the image. `cfp spark-connect` in one, two hosts in others sending their writes to
it, the Delta tables in Azurite's blob storage (`abfs://`); then `cfp verify`, in a container too,
finds the state equal to the account, and the change log holds every event once."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from observers.spark.output import delta_rs_options, parse_output
from processor.connection import storage_access
from processor.emulator.azurite import Azurite, free_port, wait_for_port
from tests import patience
from tests.helpers import Feed, emulate_afresh
from tests.image.fleet import Fleet

OUTPUT = "abfs://cfp-tables@devstoreaccount1.dfs.core.windows.net/topology"

pytestmark = pytest.mark.timeout(900)  # a Spark Connect server and two hosts, all in containers


@pytest.fixture(scope="module")
async def feed(azurite: Azurite) -> Feed:
    """Real blob operations (cfp verify lists the account) and their feed."""
    conn = azurite.connection_string
    records = await emulate_afresh(conn, seed=41, segments=3, events_per_segment=400, shards=(3, 4))
    return Feed(conn, {str(r["id"]) for r in records if r["eventType"] != "Control"})


@pytest.fixture
async def fleet(feed: Feed, tmp_path: Path) -> AsyncIterator[Fleet]:
    made = Fleet(feed.conn, "topology", tmp_path / "out")
    try:
        yield made
    finally:
        made.remove_all()


def change_log_ids(conn: str) -> Counter[str]:
    """The change log's ids as the `deltalake` package reads them from Azurite."""
    output = parse_output(OUTPUT)
    options = delta_rs_options(output, storage_access(conn))
    table = DeltaTable(output.changes, storage_options=options or None)
    found = QueryBuilder().register("changes", table).execute("SELECT id FROM changes")
    return Counter(pa.table(found).column("id").to_pylist())


async def test_spark_connect_and_two_hosts_in_containers_keep_the_tables_on_abfs(
    fleet: Fleet, feed: Feed
) -> None:
    port = free_port()
    fleet.launch(
        "spark", "spark-connect", "--port", str(port), "--spark-master", "local[2]", env={}
    )
    await asyncio.to_thread(wait_for_port, port, timeout_s=patience.left_s())
    hosts = ("h1", "h2")
    for n, name in enumerate(hosts):
        fleet.launch(
            name, "run", "--processor-name", fleet.processor, "--until-caught-up",
            "--observer", "spark", "--spark-remote", f"sc://127.0.0.1:{port}",
            "--output", OUTPUT, "--spark-warm-up-rows", "0", "--lease-expiration", "10",
            env={"CFP_HOST_NAME": name, "CFP_HTTP_PORT": str(18101 + n)},
        )  # fmt: skip
    for name in hosts:
        assert fleet.wait(name) == 0, fleet.logs(name)[-3000:]
        events = list(fleet.log_events(name))
        opened = [e for e in events if e.get("event") == "spark.opening"]
        assert [e.get("remote") for e in opened] == [f"sc://127.0.0.1:{port}"], opened
        assert any(e.get("event") == "lease.acquired" for e in events), f"{name} held no lease"
        assert any(e.get("event") == "spark.committed" for e in events), f"{name} wrote nothing"

    done = await asyncio.to_thread(fleet.run, "verify", "verify", "--output", OUTPUT)
    assert "EQUAL: every blob matches" in done, done
    assert "EQUAL: each blob's versions lead to its state row" in done, done
    ids = change_log_ids(feed.conn)
    assert set(ids) == feed.ids, f"{len(feed.ids - set(ids))} events missing"
    assert not [i for i, n in ids.items() if n > 1], "events twice in the change log"
