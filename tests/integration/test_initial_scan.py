"""`cfp run --initial-scan` with real hosts while blobs keep changing, one host killed mid-scan.

Each blob's backfill event must come before any change feed event (the barrier holds every feed
lease until the whole scan is delivered), and a consumer that applies the deliveries in order
must end with exactly the account's blobs and ETags: nothing the scan or the feed carried lost.
"""

from __future__ import annotations

import asyncio
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

from azure.storage.blob.aio import BlobServiceClient

from processor.changefeed.selection import parse_event_time
from processor.emulator.emulator import Emulator, EmulatorConfig
from processor.reading.lease_position import LeasePosition, is_scan_token
from tests.cluster import LEASE_TABLE, Cluster, Table, quick_host_args
from tests.helpers import emulate, run_cfp, until

PARTITIONS = 4
SHAPE = {"shards": (2, 3), "containers": 3, "blobs_per_container": 120}


async def account_blobs(conn: str) -> dict[tuple[str, str], str]:
    """Every blob of the emulated containers with its ETag, as listed now."""
    blobs: dict[tuple[str, str], str] = {}
    async with BlobServiceClient.from_connection_string(conn) as service:
        async for c in service.list_containers():
            if c.name.startswith("$"):
                continue
            async for b in service.get_container_client(c.name).list_blobs():
                blobs[(c.name, b.name)] = (b.etag or "").strip('"')
    return blobs


def fold(deliveries: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """What a consumer applying the deliveries in order ends with: blob -> ETag."""
    state: dict[tuple[str, str], str] = {}
    for d in deliveries:
        raw = d["event"]
        data = raw.get("data") or {}
        container, _, blob = raw["subject"].split("/containers/")[1].partition("/blobs/")
        if not blob or data.get("snapshot"):
            continue
        if raw["eventType"] == "BlobDeleted":
            state.pop((container, blob), None)
        elif data.get("etag"):
            state[(container, blob)] = data["etag"]
    return state


def scan_done(leases: list[Any]) -> bool:
    return sum(1 for x in leases if is_scan_token(x.token) and x.caught_up) == PARTITIONS


async def test_backfill_first_then_the_feed_and_nothing_lost(account: str, tmp_path: Path) -> None:
    await emulate(account, seed=51, segments=2, events_per_segment=500, **SHAPE)
    stop = asyncio.Event()
    async with BlobServiceClient.from_connection_string(account) as service:
        emulator = Emulator(service, EmulatorConfig(seed=52, block_events=(1, 20), **SHAPE))
        live = asyncio.create_task(
            emulator.run_live(stop, rate_per_s=40, segment_seconds=4, finish=True)
        )
        args = (*quick_host_args(batch=10), "--initial-scan", "--scan-partitions", str(PARTITIONS))
        cluster = Cluster(account, "scan", tmp_path, args=args)
        cluster.env["CFP_TEST_BATCH_DELAY_S"] = "0.1"  # a scan slow enough to see changes
        try:
            cluster.start("h1")
            cluster.start("h2")
            async with cluster.store() as store:
                table = Table(await store.open())

                async def some_backfill() -> bool:
                    return any(d["eventType"] == "BlobBackfill" for d in cluster.deliveries())

                await until(some_backfill, "a backfill delivery", every_s=0.2)
                cluster.signal("h1", signal.SIGKILL)  # mid-scan: its partitions resume elsewhere
                cluster.start("h3")
                await table.until(scan_done, what="the scan done")
                leases = await table.leases()
                changed_during_scan = sum(emulator.summary.events.values())

                async def changes_after_the_scan() -> bool:  # the workload runs on, 40 a second
                    return sum(emulator.summary.events.values()) >= changed_during_scan + 40

                await until(changes_after_the_scan, "changes after the scan", every_s=0.2)
                stop.set()
                await live
                expected = await account_blobs(account)

                async def applied() -> bool:  # applied in delivery order: the account as it is
                    return fold(cluster.deliveries()) == expected

                await until(applied, "deliveries that give the account", every_s=0.2)
            status = await asyncio.to_thread(
                run_cfp, account, "status", "--processor-name", "scan", "--lease-table", LEASE_TABLE
            )
            assert status.returncode == 0, status.stderr
            scan_rows = [line for line in status.stdout.splitlines() if line.startswith("scan-")]
            assert len(scan_rows) == PARTITIONS and all(" done " in r for r in scan_rows)
            assert cluster.stop_all() == {"h1": -9, "h2": 0, "h3": 0}
        finally:
            stop.set()
            cluster.kill_all()
            await asyncio.gather(live, return_exceptions=True)

    assert changed_during_scan > 0
    deliveries = cluster.deliveries()
    backfill = [d for d in deliveries if d["eventType"] == "BlobBackfill"]
    changes = [d for d in deliveries if d["eventType"] != "BlobBackfill"]
    assert backfill and changes
    # the barrier: every backfill event before any change feed event
    assert max(d["t"] for d in backfill) < min(d["t"] for d in changes)
    assert {d["lease"] for d in backfill} == {f"scan-{p:02d}" for p in range(PARTITIONS)}
    # the feed starts at the scan's start minus the slack: no older history is delivered
    started = min(
        LeasePosition.from_json(x.continuation).scan.started_at  # type: ignore[union-attr]
        for x in leases
        if is_scan_token(x.token)
    )
    assert all(
        parse_event_time(d["event"]["eventTime"]) >= started - timedelta(hours=1) for d in changes
    )


async def test_initial_scan_excludes_start_options(account: str, tmp_path: Path) -> None:
    cluster = Cluster(account, "scan2", tmp_path, args=("--initial-scan", "--start-from-now"))
    cluster.start("h1")
    assert cluster.wait("h1") == 2
    assert "--initial-scan sets where the feed starts" in (tmp_path / "h1.log").read_text()
