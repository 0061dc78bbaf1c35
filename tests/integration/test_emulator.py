"""The emulator: real operations, schema versions, determinism, live mode, hints into a queue,
a feed that appears late, loopback only."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from datetime import UTC, datetime

import pytest
from azure.storage.blob.aio import BlobServiceClient, ContainerClient

from processor import connection
from processor.changefeed.selection import EventFilter, parse_event_time
from processor.changefeed.storage.layout import CONTAINER, SEGMENTS_JSON, segment_path
from processor.changefeed.storage.manifests import parse_feed_manifest, parse_segment_manifest
from processor.connection import AZURITE_ACCOUNT
from processor.emulator.emulator import Emulator, EmulatorConfig
from processor.emulator.grid_events import GRID_EVENT_TYPES
from processor.emulator.live_writer import LiveFeedWriter
from processor.emulator.schemas import data_fields, event_types
from processor.emulator.service import open_service
from processor.hints.messages import Hint, read_message
from tests.helpers import emulate, read_all, run_cfp

SEGMENT_BEGIN = "%Y-%m-%dT%H:%MZ"  # of a segment in `cfp emulate`'s summary


@pytest.mark.parametrize("version", [1, 3, 4, 5, 6])
async def test_each_schema_version_writes_its_fields(account: str, version: int) -> None:
    await emulate(account, seed=version, segments=1, events_per_segment=150, schema_version=version)
    records, _ = await read_all(account, event_filter=EventFilter(include_control=True))
    assert len(records) >= 150
    for r in records:
        assert r["schemaVersion"] == version
        assert set(r["data"]) == data_fields(version)  # type: ignore[arg-type]
        assert r["eventType"] in event_types(version)
    kinds = Counter(str(r["data"]["api"]) for r in records)  # type: ignore[index]
    assert {"PutBlob", "DeleteBlob", "SetBlobMetadata", "SetBlobProperties", "SnapshotBlob"} <= set(
        kinds
    )
    assert ("SetBlobTier" in kinds) == (version >= 4)
    assert ("SetBlobTags" in kinds) == (version >= 5)


async def test_the_feed_explains_the_live_listing(account: str) -> None:
    summary = await emulate(account, seed=31, segments=3, events_per_segment=300)
    records, _ = await read_all(account)
    last: dict[str, dict[str, object]] = {}
    sequencers: dict[str, str] = {}
    for r in records:
        subject = str(r["subject"])
        seq = str(r["data"]["sequencer"])  # type: ignore[index]
        assert seq > sequencers.get(subject, ""), "sequencers grow per blob"
        sequencers[subject] = seq
        last[subject] = r
    async with BlobServiceClient.from_connection_string(account) as service:
        live = {}
        async for c in service.list_containers():
            if c.name.startswith("$"):
                continue
            async for b in service.get_container_client(c.name).list_blobs():
                live[f"/blobServices/default/containers/{c.name}/blobs/{b.name}"] = b
    alive = {s: r for s, r in last.items() if r["eventType"] != "BlobDeleted"}
    assert set(alive) == set(live)
    assert len(live) == summary.live_blobs
    for subject, r in alive.items():
        data = r["data"]
        assert data["etag"] == live[subject].etag.strip('"')  # type: ignore[index]
        assert data["contentLength"] == live[subject].size  # type: ignore[index]
        assert data["contentType"] == live[subject].content_settings.content_type  # type: ignore[index]


async def test_same_seed_same_feed(account: str) -> None:
    async def run() -> list[tuple[str, str, str]]:
        from processor.emulator.service import reset_account
        from tests.helpers import EMULATOR_CONTAINERS

        async with BlobServiceClient.from_connection_string(account) as service:
            await reset_account(service, EMULATOR_CONTAINERS)
        await emulate(account, seed=41, segments=2, events_per_segment=80)
        records, _ = await read_all(account, event_filter=EventFilter(include_control=True))
        return [(str(r["id"]), str(r["subject"]), str(r["eventType"])) for r in records]

    assert await run() == await run()


async def test_feed_only_writes_the_same_operations_and_touches_no_blob(account: str) -> None:
    """`feed_only` (tests of readers and hosts, which never look at the blobs): the same seed
    gives the same operations on the same blobs, with made-up ETags, and no blob is written."""

    async def run(**changes: object) -> list[tuple[str, str, str, object]]:
        from processor.emulator.service import reset_account
        from tests.helpers import EMULATOR_CONTAINERS

        async with BlobServiceClient.from_connection_string(account) as service:
            await reset_account(service, EMULATOR_CONTAINERS)
        await emulate(account, seed=43, segments=2, events_per_segment=80, **changes)
        records, _ = await read_all(account)
        return [
            (str(r["subject"]), str(r["eventType"]), str(r["data"]["etag"]),  # type: ignore[index]
             r["data"]["contentLength"])  # type: ignore[index]
            for r in records
        ]  # fmt: skip

    real = await run()
    made_up = await run(feed_only=True)
    assert [r[:2] for r in made_up] == [r[:2] for r in real]
    assert [r[3] for r in made_up] == [r[3] for r in real]  # sizes follow the operations
    etags = [r[2] for r in made_up]
    assert len(set(etags)) == len(etags) and all(e.startswith("0x") for e in etags)
    assert set(etags).isdisjoint(r[2] for r in real)
    async with BlobServiceClient.from_connection_string(account) as service:
        blobs = [
            b.name
            async for c in service.list_containers()
            if not c.name.startswith("$")
            async for b in service.get_container_client(c.name).list_blobs()
        ]
    assert blobs == []


async def test_layout_manifests_and_chunks(account: str) -> None:
    await emulate(
        account, seed=51, segments=3, events_per_segment=200, shards=(2, 4, 1), chunk_bytes=16 << 10
    )
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        names = [b.name async for b in c.list_blobs()]
        assert "idx/segments/1601/01/01/0000/meta.json" in names
        feed = parse_feed_manifest(await (await c.download_blob(SEGMENTS_JSON)).readall(), path="x")
        manifests = [n for n in names if n.startswith("idx/segments/2026")]
        shards = []
        for m in manifests:
            seg = parse_segment_manifest(await (await c.download_blob(m)).readall(), path=m)
            assert seg.is_finalized
            shards.append(len(seg.shard_prefixes))
        assert shards == [2, 4, 1]
        assert feed.last_consumable is not None and feed.last_consumable.hour == 2
        chunk = next(n for n in names if n.endswith(".avro"))
        props = await c.get_blob_client(chunk).get_blob_properties()
        assert props.blob_type == "AppendBlob"
        assert props.content_settings.content_type == "avro/binary"
        assert any(n.endswith("/00001.avro") for n in names)  # roll-over happened


@pytest.mark.parametrize("finish", [False, True], ids=["publishing", "finish"])
async def test_live_mode_keeps_the_newest_segment_publishing(account: str, finish: bool) -> None:
    """Live: the newest segment stays Publishing when the run stops, unless `--finish`."""
    result = await asyncio.to_thread(
        run_cfp,
        account,
        "emulate",
        "--live",
        "--rate",
        "40",
        "--segment-seconds",
        "2",
        "--duration",
        "7",
        "--start-time",
        "2026-03-01T00:00:00Z",
        *(["--finish"] if finish else []),
    )
    assert result.returncode == 0, result.stderr
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        manifests = sorted(
            [b.name async for b in c.list_blobs(name_starts_with="idx/segments/2026/03")]
        )
        statuses = [
            parse_segment_manifest(await (await c.download_blob(m)).readall(), path=m).status.value
            for m in manifests
        ]
        feed = parse_feed_manifest(await (await c.download_blob(SEGMENTS_JSON)).readall(), path="x")
    assert len(manifests) >= 3
    assert feed.last_consumable is not None
    records, _ = await read_all(account)
    if finish:
        assert set(statuses) == {"Finalized"}
        assert feed.last_consumable.hour == len(manifests) - 1
        assert any(str(r["eventTime"]) >= f"2026-03-01T{len(manifests) - 1:02d}" for r in records)
    else:
        assert statuses[-1] == "Publishing" and set(statuses[:-1]) == {"Finalized"}
        assert feed.last_consumable.hour == len(manifests) - 2
        assert records and all(
            str(r["eventTime"]) < f"2026-03-01T{len(manifests) - 1:02d}" for r in records
        )


def test_emulator_refuses_non_loopback_endpoints() -> None:
    secret = "c2VjcmV0LWtleS1kby1ub3QtbG9n"
    conn = f"DefaultEndpointsProtocol=https;AccountName=prod;AccountKey={secret};EndpointSuffix=core.windows.net"
    result = run_cfp(conn, "emulate", "--segments", "1")
    assert result.returncode == 1
    assert "refusing" in result.stderr and "loopback" in result.stderr
    assert secret not in result.stderr + result.stdout


def test_emulate_summary_is_json(account: str) -> None:
    result = run_cfp(account, "emulate", "--segments", "1", "--events-per-segment", "30", "--reset")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert sum(summary["events"].values()) == 30
    assert summary["segments"] == ["2026-01-01T00:00Z shards=2"]


async def _queue_texts(account: str, queue: str) -> list[str]:
    """Every message of `queue`, taken off it."""
    texts: list[str] = []
    async with connection.queue_client(account, queue) as q:
        while batch := [m async for m in q.receive_messages(max_messages=32, messages_per_page=32)]:
            texts += [m.content for m in batch]
            for m in batch:
                await q.delete_message(m)
    return texts


async def test_live_hints_are_each_operations_event_in_the_queue(account: str) -> None:
    """`--hints-queue`: one Event Grid message per operation Event Grid publishes an event for,
    read back as the hint of its feed record; event times are the wall clock's."""
    queue = f"emu-{uuid.uuid4().hex[:10]}"
    started = datetime.now(UTC)
    result = await asyncio.to_thread(
        run_cfp, account, "emulate", "--live", "--rate", "40", "--duration", "3",
        "--hints-queue", queue, "--hints-schema", "cloudevents", "--finish",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    records, _ = await read_all(account)
    hints = [read_message(t, account=AZURITE_ACCOUNT) for t in await _queue_texts(account, queue)]
    assert all(isinstance(h, Hint) for h in hints)
    published = [r for r in records if r["eventType"] in GRID_EVENT_TYPES]
    assert sorted(h.record["id"] for h in hints if isinstance(h, Hint)) == sorted(
        str(r["id"]) for r in published
    )
    assert all(started <= parse_event_time(str(r["eventTime"])) for r in records)
    assert json.loads(result.stdout)["hints"]["messages"] == len(hints)


async def test_a_publish_delay_holds_the_records_back_until_due(account: str) -> None:
    async with open_service(account) as service:
        emulator = Emulator(service, EmulatorConfig(seed=5), publish_delay_s=3600)
        await emulator.setup()
        await emulator.begin_segment(datetime.now(UTC).replace(minute=0, second=0, microsecond=0))
        await emulator.perform(20, times=None)
        await emulator.flush()
        writer = emulator.writer
        assert isinstance(writer, LiveFeedWriter)
        assert (writer.held, writer.records_written) == (20, 0)  # made, not yet in the feed
        await writer.drain()
        assert (writer.held, writer.records_written) == (0, 20)
        await emulator.finalize_segment(datetime.now(UTC))
    assert len((await read_all(account))[0]) == 20


async def test_a_wall_clock_run_leaves_its_publishing_hour_consumable(account: str) -> None:
    """`--publish-delay`: the open hour's records are readable as they reach the feed (a
    reader bound by `lastConsumable` sees them), not only once the hour is finalized."""
    started = datetime.now(UTC)
    result = await asyncio.to_thread(
        run_cfp, account, "emulate", "--live", "--rate", "40", "--duration", "3",
        "--publish-delay", "0.5",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    begin = datetime.strptime(json.loads(result.stdout)["segments"][-1].split()[0], SEGMENT_BEGIN)
    path = segment_path(begin.replace(tzinfo=UTC))
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        feed = parse_feed_manifest(await (await c.download_blob(SEGMENTS_JSON)).readall(), path="x")
        manifest = parse_segment_manifest(await (await c.download_blob(path)).readall(), path=path)
    assert manifest.status.value == "Publishing"
    assert feed.last_consumable == manifest.begin
    records, _ = await read_all(account)
    ours = [r for r in records if parse_event_time(str(r["eventTime"])) >= started]
    assert len(ours) == sum(json.loads(result.stdout)["events"].values())
