"""Continuation tokens handed between cfp and the official Python SDK, both ways, on one feed.

The feed has three segments with 2, 3 and 1 shards, several chunks per shard and many blocks per
chunk, so tokens land mid-block, at block ends and at chunk ends. Each hand-over must lose
nothing and repeat nothing: the events before the token and after it are exactly the feed.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from azure.storage.blob.changefeed import ChangeFeedClient

from processor.emulator.azurite import Azurite
from tests.helpers import Feed, emulate, emulate_afresh, json_lines, run_cfp

SEGMENT_EVENTS = 300


@pytest.fixture(scope="module")
async def feed(azurite: Azurite) -> Feed:
    account = azurite.connection_string
    await emulate_afresh(
        account,
        seed=11,
        segments=3,
        events_per_segment=SEGMENT_EVENTS,
        shards=(2, 3, 1),
        block_events=(1, 12),
        chunk_bytes=16 << 10,
        control_every=40,
    )
    everything = await asyncio.to_thread(_sdk_pages, account, None, 10_000)
    ids = [str(e["id"]) for e in everything[0] if e["eventType"] != "Control"]
    assert len(ids) == 3 * SEGMENT_EVENTS
    return Feed(account, ids)


def _sdk_pages(
    conn: str, token: str | None, per_page: int, pages: int | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """Events of the first `pages` pages an SDK reader gets from `token` (all when None), and
    its continuation token after them."""
    client = ChangeFeedClient.from_connection_string(conn)
    pager = client.list_changes(results_per_page=per_page).by_page(continuation_token=token)
    events: list[dict[str, Any]] = []
    for n, page in enumerate(pager, 1):
        events.extend(page)
        if pages is not None and n >= pages:
            break
    return events, pager.continuation_token


def _ids(events: list[dict[str, Any]]) -> list[str]:
    return [str(e["id"]) for e in events if e["eventType"] != "Control"]


@pytest.mark.parametrize(("per_page", "pages"), [(7, 1), (250, 3)])
async def test_cfp_resumes_from_an_sdk_token(feed: Feed, per_page: int, pages: int) -> None:
    before, token = await asyncio.to_thread(_sdk_pages, feed.conn, None, per_page, pages)
    assert token is not None and json.loads(token)["CursorVersion"] == 1

    result = await asyncio.to_thread(run_cfp, feed.conn, "read", "--continuation", token)
    assert result.returncode == 0, result.stderr
    after = [str(r["id"]) for r in json_lines(result.stdout)]

    assert Counter(_ids(before) + after) == Counter(feed.ids)  # nothing lost, nothing twice
    assert _ids(before) and after


@pytest.mark.parametrize("first", [300, 611])
async def test_the_sdk_resumes_from_a_cfp_token(feed: Feed, tmp_path: Path, first: int) -> None:
    saved = tmp_path / "token.json"
    result = await asyncio.to_thread(
        run_cfp,
        feed.conn,
        "read",
        "--max-events",
        str(first),
        "--save-continuation",
        str(saved),
        "--token-format",
        "sdk",
    )
    assert result.returncode == 0, result.stderr
    before = [str(r["id"]) for r in json_lines(result.stdout)]
    token = saved.read_text().strip()
    doc = json.loads(token)
    assert doc["CursorVersion"] == 1 and doc["CurrentSegmentCursor"]["ShardCursors"]

    after, _ = await asyncio.to_thread(_sdk_pages, feed.conn, token, 100)

    assert len(before) == first
    assert Counter(before + _ids(after)) == Counter(feed.ids)


async def test_a_python_block_offset_at_the_sync_marker_resumes_the_same(
    feed: Feed, tmp_path: Path
) -> None:
    """The Python SDK may save a block's offset as the start of the sync marker before it
    (16 bytes earlier than .NET); both forms must resume at the same event."""
    saved = tmp_path / "token.json"
    result = await asyncio.to_thread(
        run_cfp, feed.conn, "read", "--max-events", "400", "--save-continuation", str(saved),
        "--token-format", "sdk",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(saved.read_text())
    cursors = doc["CurrentSegmentCursor"]["ShardCursors"]
    at_block_start = [c for c in cursors if c["EventIndex"] == 0 and c["BlockOffset"] > 16]
    assert at_block_start, cursors
    for c in at_block_start:
        c["BlockOffset"] -= 16  # the sync marker before the block
    python_form = json.dumps(doc)

    dotnet = await asyncio.to_thread(run_cfp, feed.conn, "read", "--continuation", f"@{saved}")
    python = await asyncio.to_thread(run_cfp, feed.conn, "read", "--continuation", python_form)
    assert dotnet.returncode == 0 and python.returncode == 0, python.stderr
    assert json_lines(python.stdout) == json_lines(dotnet.stdout)
    assert len(json_lines(python.stdout)) == len(feed.ids) - 400


async def test_status_prints_an_sdk_token_for_the_processor(account: str, tmp_path: Path) -> None:
    """A processor caught up with the finalized segments; the SDK (which also reads the
    segment still being written) resumes from `cfp status --sdk-token` with exactly the rest."""
    await emulate(
        account, seed=12, segments=3, events_per_segment=200, shards=(2, 3, 2),
        block_events=(1, 12), chunk_bytes=16 << 10, finalize_last=False,
    )  # fmt: skip
    table = ["--lease-table", "sdktoken"]
    out = tmp_path / "out"
    result = await asyncio.to_thread(
        run_cfp, account, "run", *table, "--until-caught-up", "--no-http",
        "--observer", f"jsonl:{out}", "--lease-expiration", "3",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    delivered = [json.loads(line)["id"] for f in out.glob("*.jsonl") for line in f.open()]
    assert len(delivered) == 2 * 200

    status = await asyncio.to_thread(run_cfp, account, "status", *table, "--sdk-token")
    assert status.returncode == 0, status.stderr
    token = status.stdout.strip()
    assert json.loads(token)["CursorVersion"] == 1

    everything, _ = await asyncio.to_thread(_sdk_pages, account, None, 5000)
    rest, _ = await asyncio.to_thread(_sdk_pages, account, token, 5000)
    assert Counter(delivered + _ids(rest)) == Counter(_ids(everything))
    assert len(_ids(rest)) == 200


async def test_status_has_no_sdk_token_before_a_segment_is_entered(account: str) -> None:
    await emulate(account, seed=13, segments=1, events_per_segment=50, shards=(2,))
    table = ["--lease-table", "sdkempty"]
    result = await asyncio.to_thread(
        run_cfp, account, "run", *table, "--start-from-now", "--until-caught-up", "--no-http"
    )
    assert result.returncode == 0, result.stderr
    result = await asyncio.to_thread(run_cfp, account, "status", *table, "--sdk-token")
    assert result.returncode == 1
    assert "no lease has entered a segment yet" in result.stderr
