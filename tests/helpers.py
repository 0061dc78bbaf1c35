"""Helpers shared by the integration tests: emulate, read, run the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace
from typing import Any

from azure.storage.blob.aio import BlobServiceClient

from processor.changefeed.emulator.emulator import EmulationSummary, Emulator, EmulatorConfig
from processor.changefeed.feed_reader import FeedReader
from processor.changefeed.position import FeedPosition, RawRecord
from processor.changefeed.selection import EventFilter
from processor.changefeed.storage import FeedStorage
from processor.connection import ENV_VAR
from tests.azurite import ROOT


async def emulate(conn: str, config: EmulatorConfig | None = None, **changes: Any) -> EmulationSummary:
    config = replace(config or EmulatorConfig(), **changes)
    async with BlobServiceClient.from_connection_string(conn) as service:
        return await Emulator(service, config).run_batch()


async def read_all(
    conn: str,
    *,
    position: FeedPosition | None = None,
    event_filter: EventFilter | None = None,
    read_size: int = 8 << 20,
) -> tuple[list[RawRecord], FeedReader]:
    async with FeedStorage.from_connection_string(conn, attempts=2) as storage:
        reader = FeedReader(storage, position=position, event_filter=event_filter, read_size=read_size)
        records = [r async for batch in reader.batches() for r in batch.records]
        return records, reader


def run_cfp(conn: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", ENV_VAR: conn},
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def per_blob(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Event ids per blob (subject), in the order they were read."""
    out: dict[str, list[str]] = defaultdict(list)
    for r in records:
        out[str(r["subject"])].append(str(r["id"]))
    return dict(out)
