"""The Delta tables with embedded Spark on a local folder (the default, one command away): real
hosts, each with its own embedded Spark, give the same guarantees as on Spark Connect
(test_spark.py); the tables reach Azurite through ABFS; a host says why it cannot make its output.
The state job's tables are tested in test_delta_state_job.py. The change log's own writes are tested in
test_fenced_change_log.py.

Its tests run one after the other on one worker and share one session, while test_spark.py's
Spark Connect server runs on another."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from azure.core.exceptions import ResourceNotFoundError
from deltalake import DeltaTable, QueryBuilder

from observers.changes import records_table
from observers.spark.changelog import ChangeLog
from observers.spark.fence import LeaseFence
from observers.spark.output import Output, parse_output
from observers.spark.session import SparkOptions, new_session
from observers.spark.tables import create_tables
from tests.helpers import Feed, run_cfp
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
)

pytestmark = pytest.mark.timeout(600)
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
    return records_table(records, keys, shard=lease, segment=SEGMENT)


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

    from observers.spark.container import ensure_container
    from observers.spark.output import delta_rs_options
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

    from observers.errors import PluginLoadError
    from observers.spark.container import ensure_container
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
