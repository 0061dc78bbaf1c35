"""Reader behaviour against Azurite: torn blocks, lastConsumable and --follow, filters."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

from azure.storage.blob.aio import BlobServiceClient, ContainerClient

from processor.changefeed.decoding.avro_chunk import parse_header
from processor.changefeed.feed_reader import FeedReader
from processor.changefeed.position import FeedPosition
from processor.changefeed.selection import EventFilter, parse_event_time
from processor.changefeed.storage.feed_storage import FeedStorage
from processor.changefeed.storage.layout import CONTAINER, SEGMENTS_JSON
from processor.connection import ENV_VAR
from processor.emulator.avro_encoding import RecordEncoder, encode_block
from processor.emulator.azurite import ROOT
from processor.emulator.emulator import DEFAULT_START, Emulator, EmulatorConfig
from processor.emulator.feed_writer import iso_ms
from processor.emulator.schemas import writer_schema
from tests import patience
from tests.helpers import emulate, json_lines, per_blob, read_all, run_cfp

H = timedelta(hours=1)


async def set_last_consumable(conn: str, at: datetime) -> None:
    async with ContainerClient.from_connection_string(conn, CONTAINER) as c:
        body = f'{{"version":0,"lastConsumable":"{iso_ms(at)}"}}'.encode()
        await c.upload_blob(SEGMENTS_JSON, body, overwrite=True)


async def test_torn_trailing_block_waits_for_the_rest(account: str) -> None:
    async with BlobServiceClient.from_connection_string(account) as service:
        emu = Emulator(service, EmulatorConfig(seed=3, shards=(1,), block_events=(5, 5)))
        begin = await emu.setup()
        await emu.begin_segment(begin)
        await emu.perform(30, times=[begin + timedelta(seconds=i) for i in range(30)])
        await emu.flush()
        await emu.writer.set_last_consumable(begin)  # Publishing, but consumable
        first, reader = await read_all(account)
        assert len(first) == 30
        pos = reader.position
        async with service.get_container_client(CONTAINER) as c:
            chunk = [b.name async for b in c.list_blobs(name_starts_with="log/")][-1]
            blob = c.get_blob_client(chunk)
            header = parse_header(
                await (await blob.download_blob(offset=0, length=4096)).readall(), chunk=chunk
            )
            enc = RecordEncoder(writer_schema(5))
            extra = [emu.records.control_event(at=begin, counter=1000 + i) for i in range(3)]
            for r in extra:
                r["eventType"] = "BlobCreated"
            block = encode_block([enc.encode(r) for r in extra], header.sync)
            await blob.append_block(block[: len(block) // 2])
            torn, reader2 = await read_all(account, position=pos)
            assert torn == [] and reader2.position == pos
            await blob.append_block(block[len(block) // 2 :])
            rest, _ = await read_all(account, position=pos)
            assert [r["id"] for r in rest] == [r["id"] for r in extra]


async def test_last_consumable_hides_later_segments_and_follow_picks_them_up(
    account: str, tmp_path: Path
) -> None:
    await emulate(account, seed=5, segments=3, events_per_segment=40, shards=(2, 1, 3))
    everything, _ = await read_all(account)
    assert len(everything) == 120
    await set_last_consumable(account, DEFAULT_START)
    only_first = json_lines((await asyncio.to_thread(run_cfp, account, "read")).stdout)
    assert {r["eventTime"][:13] for r in only_first} == {"2026-01-01T00"}
    assert len(only_first) == 40

    saved = tmp_path / "pos.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "processor",
            "read",
            "--follow",
            "--poll-interval",
            "0.2",
            "--save-continuation",
            str(saved),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={ENV_VAR: account, "PATH": "/usr/bin:/bin"},
    )
    lines: list[bytes] = []
    threading.Thread(
        target=lambda: lines.extend(iter(proc.stdout.readline, b"")), daemon=True
    ).start()  # type: ignore[union-attr]

    async def wait_for(n: int) -> None:
        deadline = patience.deadline()
        while len(lines) < n:
            assert time.monotonic() < deadline, f"only {len(lines)} of {n} lines"
            assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
            await asyncio.sleep(0.05)

    try:
        await wait_for(40)
        await asyncio.sleep(0.5)  # fixed on purpose: 2.5 polls of 0.2 s (cfp read marks no poll)
        assert len(lines) == 40  # nothing past lastConsumable
        await set_last_consumable(account, DEFAULT_START + 2 * H)
        await wait_for(120)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=patience.left_s()) == 0
    finally:
        proc.kill()
    assert [r["id"] for r in json_lines(b"".join(lines).decode())] == [r["id"] for r in everything]
    again = await asyncio.to_thread(run_cfp, account, "read", "--continuation", f"@{saved}")
    assert again.returncode == 0 and again.stdout == ""


async def test_time_range_keeps_slack_segments_and_filters_each_event(account: str) -> None:
    await emulate(account, seed=11, segments=4, events_per_segment=60)
    everything, _ = await read_all(account)
    start, end = DEFAULT_START + 1.5 * H, DEFAULT_START + 2.25 * H
    expected = [r for r in everything if start <= parse_event_time(str(r["eventTime"])) < end]
    assert 0 < len(expected) < len(everything)
    result = await asyncio.to_thread(
        run_cfp, account, "read", "--start-time", start.isoformat(), "--end-time", end.isoformat()
    )
    assert result.returncode == 0, result.stderr
    assert [r["id"] for r in json_lines(result.stdout)] == [r["id"] for r in expected]


async def test_event_type_filter_and_control(account: str) -> None:
    await emulate(account, seed=12, segments=2, events_per_segment=100, control_every=20)
    everything, _ = await read_all(account, event_filter=EventFilter(include_control=True))
    wanted = {"BlobDeleted", "BlobTierChanged"}
    result = await asyncio.to_thread(
        run_cfp, account, "read", "--event-type", "BlobDeleted", "--event-type", "BlobTierChanged"
    )
    got = json_lines(result.stdout)
    assert [r["id"] for r in got] == [r["id"] for r in everything if r["eventType"] in wanted]
    controls = [r for r in everything if r["eventType"] == "Control"]
    assert len(controls) >= 10
    with_control = json_lines(
        (await asyncio.to_thread(run_cfp, account, "read", "--include-control")).stdout
    )
    assert len(with_control) == len(everything)


async def test_empty_and_missing_feed(account: str) -> None:
    result = await asyncio.to_thread(run_cfp, account, "read")
    assert result.returncode == 0 and result.stdout == ""


def test_max_events_and_continuation_resume_exactly(account: str, tmp_path: Path) -> None:
    asyncio.run(emulate(account, seed=13, segments=2, events_per_segment=50, block_events=(3, 9)))
    full = json_lines(run_cfp(account, "read").stdout)
    saved = tmp_path / "c.json"
    got: list[dict[str, object]] = []
    for _ in range(20):
        args = ["read", "--max-events", "13", "--save-continuation", str(saved)]
        if saved.exists():
            args += ["--continuation", f"@{saved}"]
        out = run_cfp(account, *args)
        assert out.returncode == 0, out.stderr
        page = json_lines(out.stdout)
        if not page:
            break
        got += page
    assert sorted(r["id"] for r in got) == sorted(r["id"] for r in full)
    assert per_blob(got) == per_blob(full)


async def test_the_next_segment_is_fetched_while_this_one_is_read_and_waits_its_turn(
    account: str,
) -> None:
    """Once a segment's first batch is out, the next segment's shards are listed and their
    first bytes fetched, while the reader holds that batch; the next segment's events still
    come only after every event of this one, the events a read from there gets. The read's
    first shard is fetched alone, until its first batch is in."""
    await emulate(account, segments=3, shards=(2,), events_per_segment=120)
    order: list[str] = []
    asked: dict[str, asyncio.Event] = {}  # a GET of a chunk of the segment (its hour folder)
    gets: list[tuple[str, int]] = []  # each GET's chunk, and the GETs answered when it began

    class Watched(FeedStorage):
        async def read_range(self, path: str, offset: int, length: int) -> bytes:
            hour = "/".join(path.split("/")[2:6])
            asked.setdefault(hour, asyncio.Event()).set()
            gets.append((path, len(answered)))
            data = await super().read_range(path, offset, length)
            answered.append(path)
            return data

    answered: list[str] = []

    ids: list[str] = []
    async with (
        Watched.from_connection_string(account, attempts=2) as storage,
        FeedReader(storage, event_filter=EventFilter(include_control=True)) as reader,
    ):
        async for batch in reader.batches():
            if batch.segment not in order:
                order.append(batch.segment)
                if len(order) > 1:  # the one before was fetched while its first batch was held
                    hour = order[-1].removeprefix("idx/segments/").removesuffix("/meta.json")
                    assert asked[hour].is_set()
                else:
                    hour = "2026/01/01/0100"  # the second segment's
                    async with asyncio.timeout(patience.left_s()):
                        await asked.setdefault(hour, asyncio.Event()).wait()
            assert batch.segment == order[-1]  # the barrier: no segment comes back
            ids += [r["id"] for r in batch.records]
    assert len(order) == 3
    assert gets[0] == ("log/00/2026/01/01/0000/00000.avro", 0)
    assert gets[1][0].startswith("log/01/2026/01/01/0000/") and gets[1][1] == 1
    everything = EventFilter(include_control=True)
    resumed, _ = await read_all(
        account, position=FeedPosition(order[1], False, {}), event_filter=everything
    )
    assert ids[-len(resumed) :] == [r["id"] for r in resumed] and len(ids) > len(resumed)
