"""Helpers shared by the integration tests: emulate, read, run the CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from processor.changefeed.decoding.decode import RawRecord
from processor.changefeed.feed_reader import FeedReader
from processor.changefeed.position import FeedPosition
from processor.changefeed.selection import EventFilter
from processor.changefeed.storage.feed_storage import FeedStorage
from processor.connection import ENV_VAR
from processor.emulator.azurite import ROOT
from processor.emulator.emulator import EmulationSummary, Emulator, EmulatorConfig
from processor.emulator.service import open_service, reset_account
from tests import patience

EMULATOR_CONTAINERS = [f"cfp-emu-{i}" for i in range(8)]  # what the emulator writes to


async def emulate(
    conn: str, config: EmulatorConfig | None = None, **changes: Any
) -> EmulationSummary:
    config = replace(config or EmulatorConfig(), **changes)
    async with open_service(conn) as service:
        return await Emulator(service, config).run_batch()


@dataclass
class Feed:
    """An emulated feed a test module shares: its account and the ids of its events."""

    conn: str
    ids: set[str]


async def emulate_afresh(conn: str, **changes: Any) -> list[RawRecord]:
    """Empty the account, emulate a feed with `changes` to the default config, and read it."""
    async with open_service(conn) as service:
        await reset_account(service, EMULATOR_CONTAINERS)
    await emulate(conn, **changes)
    records, _ = await read_all(conn)
    return records


async def read_all(
    conn: str,
    *,
    position: FeedPosition | None = None,
    event_filter: EventFilter | None = None,
    read_size: int = 8 << 20,
) -> tuple[list[RawRecord], FeedReader]:
    async with (
        FeedStorage.from_connection_string(conn, attempts=2) as storage,
        FeedReader(
            storage, position=position, event_filter=event_filter, read_size=read_size
        ) as reader,
    ):
        records = [r async for batch in reader.batches() for r in batch.records]
        return records, reader


def run_cfp(
    conn: str,
    *args: str,
    python: str = sys.executable,
    path: str = "/usr/bin:/bin",
    flags: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """`cfp ARGS` against the account `conn`, to its end (as long as the test may wait), run by
    `python` (another virtualenv's: the checkout is its working directory) with PATH `path`
    and the interpreter's `flags` (`-X importtime`)."""
    return subprocess.run(
        [python, *flags, "-m", "processor", *args],
        capture_output=True,
        text=True,
        timeout=patience.left_s(),
        cwd=ROOT,
        env={"PATH": path, ENV_VAR: conn},
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def per_blob(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Event ids per blob (subject), in the order they were read."""
    out: dict[str, list[str]] = defaultdict(list)
    for r in records:
        out[str(r["subject"])].append(str(r["id"]))
    return dict(out)


async def upload_recorded_tree(conn: str, root: Path, *, last_consumable: str) -> None:
    """Put recorded `$blobchangefeed` files into Azurite: manifests as block blobs, chunks as
    append blobs written header first and then one append per block, as the service writes them."""
    from azure.storage.blob.aio import ContainerClient

    from processor.changefeed.decoding.avro_chunk import parse_header, scan_blocks

    async with ContainerClient.from_connection_string(conn, "$blobchangefeed") as c:
        if not await c.exists():
            await c.create_container()
        for path in sorted(root.rglob("*")):
            name = path.relative_to(root).as_posix()
            if path.is_dir() or name.endswith(".jsonl") or not name.startswith(("idx/", "log/")):
                continue
            data = path.read_bytes()
            if name.endswith(".avro"):
                blob = c.get_blob_client(name)
                await blob.create_append_blob()
                header = parse_header(data, chunk=name)
                await blob.append_block(data[: header.size])
                scan = scan_blocks(
                    data[header.size :], base=header.size, sync=header.sync, chunk=name
                )
                for b in scan.blocks:
                    await blob.append_block(data[b.offset : b.end])
            else:
                await c.upload_blob(name, data, overwrite=True)
        body = f'{{"version":0,"lastConsumable":"{last_consumable}"}}'.encode()
        await c.upload_blob("meta/segments.json", body, overwrite=True)


async def until(probe: Any, what: str, *, every_s: float = 0.05) -> Any:
    """Await `probe()` until it returns something truthy (returned); AssertionError naming
    `what` when the test may wait no longer (`tests/patience.py`)."""
    deadline = patience.deadline()
    while True:
        got = await probe()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(every_s)


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of every sample of `name` whose labels include `labels` (0 if none: a labelled
    counter has no sample before its first increment)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        key, _, value = line.rpartition(" ")
        if key != name and not key.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in key for k, v in labels.items()):
            total += float(value)
    return total


def get_text(url: str) -> str:
    """The body of a GET of `url` (a host's /metrics or /status), blocking: for a thread."""
    with urllib.request.urlopen(url, timeout=patience.left_s()) as reply:
        return str(reply.read().decode())
