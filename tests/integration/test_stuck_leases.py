"""Bad data and poison batches with real hosts: a lease parks in front of what it cannot get past,
the others go on, `cfp status` shows it, and `cfp lease move` skips exactly what it says.

Each test emulates a small feed (2 segments; 3 shards, then 1), damages it, and runs real
`cfp run` processes over it with the JSON-lines test observer.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from azure.storage.blob.aio import ContainerClient

from processor.changefeed.decoding.avro_chunk import (
    BlockSpan,
    ChunkHeader,
    parse_header,
    read_long,
    scan_blocks,
)
from processor.changefeed.decoding.decode import decode_blocks
from processor.changefeed.storage.layout import CONTAINER
from processor.emulator.avro_encoding import encode_long_padded
from tests.cluster import Cluster, quick_host_args
from tests.helpers import emulate, read_all, until

ARGS = quick_host_args(batch=6, observer="tests.plugins:PoisonJsonl")
BAD_LEASE = "01"
CHUNK = "log/01/2026/01/01/0000/00000.avro"
_processors = itertools.count()

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
async def cluster(account: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(account, f"stuck{next(_processors)}", tmp_path, args=ARGS)
    try:
        yield c
    finally:
        c.kill_all()


async def _feed(account: str, **changes: Any) -> set[str]:
    """Emulate the feed; the ids of its non-Control events."""
    config: dict[str, Any] = {
        "seed": 21,
        "segments": 2,
        "events_per_segment": 90,
        "shards": (3, 1),
        "block_events": (4, 8),
    }
    await emulate(account, **(config | changes))
    records, _ = await read_all(account)
    return {str(r["id"]) for r in records}


async def _chunk(account: str) -> tuple[bytes, ChunkHeader, list[BlockSpan]]:
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        data = await (await c.download_blob(CHUNK)).readall()
    header = parse_header(data, chunk=CHUNK)
    blocks = scan_blocks(data[header.size :], base=header.size, sync=header.sync, chunk=CHUNK)
    return data, header, list(blocks.blocks)


def _ids(data: bytes, header: ChunkHeader, blocks: list[BlockSpan]) -> set[str]:
    decoded = decode_blocks(data, base=0, blocks=blocks, skip=0, header=header, chunk=CHUNK)
    return {str(r["id"]) for r in decoded.records}


def _status(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {row["lease"]: row for row in cluster.status()["leases"]}


async def test_a_corrupt_block_parks_its_lease_and_a_move_skips_exactly_that_block(
    account: str, cluster: Cluster
) -> None:
    ids = await _feed(account)
    data, header, blocks = await _chunk(account)
    bad = blocks[2]
    start, end = bad.offset + 20, bad.end - 16  # its records, framing kept
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        await c.delete_blob(CHUNK)
        await c.upload_blob(CHUNK, data[:start] + b"\xff" * (end - start) + data[end:])
    before_bad = _ids(data, header, blocks[:2]) & ids
    lost = _ids(data, header, [bad]) & ids
    assert before_bad and lost

    assert await cluster.run_until_caught_up("h1") == 1
    log = (cluster.workdir / "h1.log").read_text()
    assert f"lease {BAD_LEASE} is parked" in log and f"{CHUNK} at byte {bad.offset}" in log
    rows = _status(cluster)
    assert rows[BAD_LEASE]["parked"] and f"at byte {bad.offset}" in rows[BAD_LEASE]["error"]
    assert rows[BAD_LEASE]["offset"] == bad.offset  # stopped in front of the bad block
    assert not any(r["parked"] for t, r in rows.items() if t != BAD_LEASE)
    got = cluster.delivered()
    assert not set(got) & lost
    # the other shards of segment 1 all came; the second segment waits behind the parked lease
    from_bad_lease = {d["id"] for d in cluster.deliveries() if d["lease"] == BAD_LEASE}
    assert from_bad_lease == before_bad

    moved = cluster.cfp("lease", "move", BAD_LEASE, "--past", "block", "--reason", "test")
    assert moved.returncode == 0, moved.stderr
    assert f"({bad.end - bad.offset} bytes of the feed skipped)" in moved.stdout
    row = _status(cluster)[BAD_LEASE]
    assert not row["parked"] and row["error"] is None and row["offset"] == bad.end
    (move,) = row["moves"]
    assert move["skippedBytes"] == bad.end - bad.offset and move["reason"] == "test"
    assert f"at byte {bad.offset}" in move["error"]

    assert await cluster.run_until_caught_up("h2") == 0
    got = cluster.delivered()
    assert set(got) == ids - lost and max(got.values()) == 1


async def test_a_block_that_spins_the_decoder_parks_its_lease_and_the_host_leaves(
    account: str, cluster: Cluster
) -> None:
    """A block whose count is one short of its records makes the native decoder spin for ever:
    at the deadline the host falls back to fastavro (which names the block), parks that lease
    in front of it, releases the others and exits 3, so that it is restarted without the
    thread the call holds."""
    await _feed(account, events_per_segment=1500)  # windows the native decoder is given
    data, _, blocks = await _chunk(account)
    bad = blocks[2]
    count, _ = read_long(data, bad.offset)
    spinning = data[: bad.offset] + encode_long_padded(count - 1) + data[bad.offset + 10 :]
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        await c.delete_blob(CHUNK)
        await c.upload_blob(CHUNK, spinning)

    # the spinning call keeps a core for as long as the host lives: under `make test` the
    # host's renewals then lag, and with the tests' 3 s expiry it could fence itself off the
    # lease before it parks it (seen once in CI); the expiry plays no part in what is tested
    slack = ("--lease-expiration", "20")
    assert await cluster.run_until_caught_up("h1", "--decode-deadline", "2", *slack) == 3
    events = cluster.log_events("h1")
    assert any(e.get("event") == "decode.stuck" and e.get("chunk") == CHUNK for e in events)
    rows = _status(cluster)
    assert rows[BAD_LEASE]["parked"] and f"{CHUNK} at byte {bad.offset}" in rows[BAD_LEASE]["error"]
    assert rows[BAD_LEASE]["offset"] == bad.offset  # the good blocks before it came
    assert not any(r["parked"] or r["owner"] for t, r in rows.items() if t != BAD_LEASE)
    log = (cluster.workdir / "h1.log").read_text()
    assert "the native Avro decoder did not return within 2 s" in log


async def _delete_a_middle_chunk(account: str, ids: set[str]) -> tuple[list[str], str, set[str]]:
    """Delete the second chunk of BAD_LEASE's shard; (its chunk names, the gone one, its ids)."""
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        shard = CHUNK.rsplit("/", 1)[0] + "/"
        chunk_names = [b.name async for b in c.list_blobs(name_starts_with=shard)]
        assert len(chunk_names) >= 3, chunk_names
        gone = chunk_names[1]
        data = await (await c.download_blob(gone)).readall()
        await c.delete_blob(gone)
    header = parse_header(data, chunk=gone)
    scan = scan_blocks(data[header.size :], base=header.size, sync=header.sync, chunk=gone)
    lost = {
        str(r["id"])
        for r in decode_blocks(
            data, base=0, blocks=list(scan.blocks), skip=0, header=header, chunk=gone
        ).records
    } & ids
    return chunk_names, gone, lost


async def test_a_missing_chunk_parks_its_lease_and_nothing_after_it_is_read_until_moved(
    account: str, cluster: Cluster
) -> None:
    """With `--on-gap stop`: parked in front of the gap until an operator moves it."""
    ids = await _feed(account, chunk_bytes=2048)
    chunk_names, gone, lost = await _delete_a_middle_chunk(account, ids)

    assert await cluster.run_until_caught_up("h1", "--on-gap", "stop") == 1
    row = _status(cluster)[BAD_LEASE]
    assert row["parked"] and gone in row["error"] and "missing" in row["error"]
    assert row["chunk"] == chunk_names[0]  # at the end of the chunk before the gap
    later = {d["id"] for d in cluster.deliveries() if d["lease"] == BAD_LEASE}
    assert not later & lost

    assert cluster.cfp("lease", "move", BAD_LEASE, "--past", "chunk").returncode == 0
    row = _status(cluster)[BAD_LEASE]
    assert row["chunk"] == chunk_names[2] and row["moves"][0]["skippedBytes"] == 0
    assert await cluster.run_until_caught_up("h2", "--on-gap", "stop") == 0
    assert set(cluster.delivered()) == ids - lost


async def test_a_missing_chunk_is_recorded_as_a_gap_and_stepped_over_by_default(
    account: str, cluster: Cluster
) -> None:
    ids = await _feed(account, chunk_bytes=2048)
    chunk_names, gone, lost = await _delete_a_middle_chunk(account, ids)
    assert await cluster.run_until_caught_up("h1") == 0
    got = cluster.delivered()
    assert set(got) == ids - lost  # everything still present, nothing of the gone chunk
    row = _status(cluster)[BAD_LEASE]
    assert not row["parked"] and row["caughtUp"]
    (gap,) = row["gaps"]
    assert gap["reason"] == "retention gap" and gone in gap["error"]
    assert json.loads(gap["from"])["shard"]["chunk"] == chunk_names[0]
    assert json.loads(gap["to"])["shard"] == {"chunk": chunk_names[2], "offset": 0, "index": 0}
    assert not any(r["gaps"] for t, r in _status(cluster).items() if t != BAD_LEASE)
    assert any(
        e.get("event") == "lease.gap" and e.get("missing") == gone for e in cluster.log_events("h1")
    )


async def test_a_segment_deleted_under_stopped_leases_is_a_gap_to_the_next_segment(
    account: str, cluster: Cluster
) -> None:
    """Retention deletes the oldest segment while leases still point into it: each such lease
    records one gap and goes on with the next segment; nothing of later segments is lost."""
    ids = await _feed(account, segments=3, events_per_segment=300, shards=(3, 3, 3))
    cluster.env["CFP_TEST_BATCH_DELAY_S"] = "0.2"
    cluster.start("h1")

    async def some_delivered() -> bool:
        return len(cluster.deliveries()) >= 30

    await until(some_delivered, "30 deliveries", every_s=0.2)
    cluster.signal("h1", signal.SIGTERM)
    assert await asyncio.to_thread(cluster.wait, "h1") == 0
    first = "idx/segments/2026/01/01/0000/meta.json"
    inside = {
        t for t, r in _status(cluster).items() if r["segment"] == first and not r["segmentDone"]
    }
    assert inside, "no lease stopped inside the first segment"
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        doomed = [b.name async for b in c.list_blobs(name_starts_with="log/")]
        for name in [n for n in doomed if "/2026/01/01/0000/" in n] + [first]:
            await c.delete_blob(name)
    later = {
        str(r["id"]) for r in (await read_all(account))[0]
    }  # what is still in the feed: segments 2 and 3
    cluster.env["CFP_TEST_BATCH_DELAY_S"] = "0"
    assert await cluster.run_until_caught_up("h2") == 0
    assert later <= set(cluster.delivered()) and later < ids
    rows = _status(cluster)
    for token, row in rows.items():
        if token in inside:
            (gap,) = row["gaps"]
            assert json.loads(gap["to"])["segment"] == first and json.loads(gap["to"])["done"]
            assert first in gap["error"]
        else:
            assert row["gaps"] == []


async def test_an_unsafe_manifest_parks_the_leases_that_reach_it(
    account: str, cluster: Cluster
) -> None:
    await _feed(account)
    segment = "idx/segments/2026/01/01/0100/meta.json"
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        doc = json.loads(await (await c.download_blob(segment)).readall())
        doc["chunkFilePaths"] = ["$blobchangefeed/log/../meta/"]
        await c.upload_blob(segment, json.dumps(doc), overwrite=True)
    assert await cluster.run_until_caught_up("h1") == 1
    rows = _status(cluster)
    # every lease must read the manifest to learn whether its shard is in the segment: all
    # stop in front of it, each with segment 1 fully delivered
    assert sorted(rows) == ["00", "01", "02"]
    for row in rows.values():
        assert row["parked"] and segment in row["error"]
        assert row["segment"] == "idx/segments/2026/01/01/0000/meta.json" and row["segmentDone"]
    assert "outside $blobchangefeed/log/" in (cluster.workdir / "h1.log").read_text()


async def test_a_poison_batch_is_retried_then_stops_or_is_dead_lettered_as_configured(
    account: str, cluster: Cluster, tmp_path: Path
) -> None:
    ids = await _feed(account)
    data, header, blocks = await _chunk(account)
    poison = sorted(_ids(data, header, blocks[2:]) & ids)[0]
    cluster.env["CFP_TEST_POISON_IDS"] = poison

    # stop: parked in front of the batch, nothing of it or after it checkpointed
    assert await cluster.run_until_caught_up("h1", "--on-observer-error", "stop") == 1
    row = _status(cluster)[BAD_LEASE]
    assert row["parked"] and "poison events" in row["error"] and "process_changes" in row["error"]
    assert poison not in cluster.delivered()
    assert cluster.cfp("lease", "resume", BAD_LEASE).returncode == 0

    # dead-letter: written with its error, checkpointed past, counted; everything else arrives
    letters = tmp_path / "dead"
    rc = await cluster.run_until_caught_up(
        "h2",
        "--on-observer-error", "dead-letter",
        "--observer-attempts", "2",
        "--dead-letter-dir", str(letters),
    )  # fmt: skip
    assert rc == 0
    (letter,) = letters.glob(f"{cluster.processor}/{BAD_LEASE}/*.jsonl")
    head, *records = (json.loads(line) for line in letter.read_text().splitlines())
    assert head["lease"] == BAD_LEASE and "poison events" in head["error"]
    assert head["events"] == len(records) and poison in {r["id"] for r in records}
    dead = {str(r["id"]) for r in records}
    assert set(cluster.delivered()) == ids - dead
    assert _status(cluster)[BAD_LEASE]["deadLetters"] == 1


async def test_a_failing_observer_is_retried_by_default_and_loses_nothing(
    account: str, cluster: Cluster
) -> None:
    ids = await _feed(account)
    cluster.env["CFP_TEST_FAIL_FIRST"] = "4"
    assert await cluster.run_until_caught_up("h1") == 0
    assert set(cluster.delivered()) == ids
    retries = [e for e in cluster.log_events("h1") if e.get("event") == "observer.retry"]
    assert len(retries) == 4


async def test_a_malformed_segments_json_parks_every_lease_until_resumed(
    account: str, cluster: Cluster
) -> None:
    ids = await _feed(account)
    path = "meta/segments.json"
    async with ContainerClient.from_connection_string(account, CONTAINER) as c:
        good = await (await c.download_blob(path)).readall()
        cluster.env["CFP_TEST_BATCH_DELAY_S"] = "0.2"
        cluster.start("h1", "--until-caught-up")
        await cluster.logged("h1", "worker.started")  # the leases exist
        await c.upload_blob(path, b'{"version": 0, "lastConsumable": ', overwrite=True)
        assert await asyncio.to_thread(cluster.wait, "h1") == 1
        rows = _status(cluster)
        assert rows and all(r["parked"] and path in r["error"] for r in rows.values())
        await c.upload_blob(path, good, overwrite=True)  # fixed outside
    resumed = cluster.cfp("lease", "resume", "--all-parked")
    assert resumed.returncode == 0 and resumed.stdout.count("resumed at") == len(rows)
    cluster.env["CFP_TEST_BATCH_DELAY_S"] = "0"
    assert await cluster.run_until_caught_up("h2") == 0
    got = cluster.delivered()
    assert set(got) == ids and max(got.values()) == 1
