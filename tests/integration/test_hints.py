"""Hints from a real Azurite queue into real hosts: Event Grid's messages in both schemas and
encodings, at least once to the observer, bad ones in `<queue>-poison` with their reason, and
none lost when the host holding them is killed.

Each test emulates a small feed, writes the Event Grid event of each of its records into a queue
of its own (as the subscription would), and runs `cfp run --hints-queue` hosts with the JSON-lines
test observer, which writes hints as lines with `"provisional": true`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from processor import connection
from processor.emulator.azurite import Azurite
from processor.emulator.grid_events import grid_event, queue_text
from processor.hints.poison import poison_queue_name
from tests.cluster import Cluster, quick_host_args
from tests.helpers import emulate, get_text, metric, read_all, until

pytestmark = pytest.mark.timeout(240)
_processors = itertools.count()

FEED: dict[str, Any] = {
    "seed": 23,
    "segments": 2,
    "events_per_segment": 60,
    "shards": (2, 2),
    "block_events": (3, 9),
    "feed_only": True,
}
POISON = {  # a bad body -> the reason its copy must give
    "garbage, neither JSON nor Base64!": "unparsable",
    queue_text({"hello": "world"}): "wrong_schema",
}


@pytest.fixture
async def queue(account: str) -> AsyncIterator[str]:
    name = f"hints-{uuid.uuid4().hex[:12]}"
    async with connection.queue_client(account, name) as q:
        await q.create_queue()
    yield name


@pytest.fixture
async def cluster(account: str, tmp_path: Path, queue: str) -> AsyncIterator[Cluster]:
    args = (*quick_host_args(batch=20), "--hints-queue", queue, "--hints-poll-interval", "0.2")
    c = Cluster(account, f"hints{next(_processors)}", tmp_path, args=args)
    try:
        yield c
    finally:
        c.kill_all()


async def _records(account: str) -> list[dict[str, Any]]:
    await emulate(account, **FEED)
    records, _ = await read_all(account)
    return records


def _events(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Event Grid events of `records` (those Event Grid publishes), alternating schemas."""
    events = [grid_event(r, cloud_events=i % 2 == 1) for i, r in enumerate(records)]
    return [e for e in events if e is not None]


async def _send(account: str, queue: str, texts: list[str]) -> None:
    async with connection.queue_client(account, queue) as q:
        for text in texts:
            await q.send_message(text)


async def _waiting(account: str, queue: str) -> int:
    """Messages in `queue`, visible or held by a host (deleted ones are not)."""
    async with connection.queue_client(account, queue) as q:
        return int((await q.get_queue_properties()).approximate_message_count)


async def _poison_copies(account: str, queue: str) -> list[dict[str, Any]]:
    async with connection.queue_client(account, poison_queue_name(queue)) as q:
        return [json.loads(m.content) for m in await q.peek_messages(max_messages=32)]


def _hint_lines(cluster: Cluster) -> list[dict[str, Any]]:
    return [d for d in cluster.deliveries() if d.get("provisional")]


def _feed_lines(cluster: Cluster) -> list[dict[str, Any]]:
    return [d for d in cluster.deliveries() if not d.get("provisional")]


def _everything_settled(
    cluster: Cluster,
    conn: str,
    queue: str,
    events: list[dict[str, Any]],
    records: list[dict[str, Any]],
) -> Callable[[], Awaitable[bool]]:
    """A probe: every hint and every feed record delivered, and every message settled."""

    async def settled() -> bool:
        hinted = {d["id"] for d in _hint_lines(cluster)}
        fed = {d["id"] for d in _feed_lines(cluster)}
        return (
            hinted == {e["id"] for e in events}
            and fed == {r["id"] for r in records}
            and await _waiting(conn, queue) == 0
        )

    return settled


async def test_hints_reach_the_observer_and_bad_messages_land_in_poison_with_their_reason(
    account: str, queue: str, cluster: Cluster
) -> None:
    records = await _records(account)
    events = _events(records)
    texts = [queue_text(e, encoded=i % 3 != 0) for i, e in enumerate(events)]
    texts += texts[:10]  # Event Grid delivers at least once: some twice
    await _send(account, queue, [*texts, *POISON])
    cluster.start("h1")
    cluster.start("h2")

    settled = _everything_settled(cluster, account, queue, events, records)
    await until(settled, "every hint delivered and every message settled", every_s=0.3)
    hints = _hint_lines(cluster)
    assert {(d["lease"], d["position"], d["epoch"]) for d in hints} == {("hints", "", 0)}
    by_id = {e["id"]: e for e in events}
    for line in hints:  # shaped as the feed's record of the same change
        event = by_id[line["id"]]
        assert line["subject"] == event["subject"]
        assert line["sequencer"] == event["data"]["sequencer"]
        assert line["eventType"] == event.get("eventType", event.get("type")).rpartition(".")[2]
    assert Counter(d["id"] for d in _feed_lines(cluster)) == Counter(r["id"] for r in records)
    copies = await _poison_copies(account, queue)
    assert sorted((c["reason"], c["body"]) for c in copies) == sorted(
        (reason, body) for body, reason in POISON.items()
    )
    assert all(c["queue"] == queue and c["dequeue_count"] == 1 for c in copies)
    scrapes = [
        await asyncio.to_thread(get_text, f"{await cluster.endpoint(h)}/metrics")
        for h in ("h1", "h2")
    ]
    assert sum(metric(s, "cfp_hint_messages_poison_total") for s in scrapes) == len(POISON)
    assert sum(metric(s, "cfp_hints_total") for s in scrapes) == len(texts)
    assert sum(metric(s, "cfp_event_age_seconds_count", source="hint") for s in scrapes) == len(
        texts
    )
    for line in (await asyncio.to_thread(cluster.log_events, "h1")) + cluster.log_events("h2"):
        if line.get("event") == "hints.poison":  # named, never quoted
            assert "world" not in json.dumps(line) and "garbage" not in json.dumps(line)

    async def ages_in_rows() -> bool:  # `cfp status` shows how fresh each host's events were
        hosts = (await asyncio.to_thread(cluster.status))["hosts"]
        return any("hint p99" in (h["freshness"] or {}) for h in hosts)

    await until(ages_in_rows, "a host row with its hints' ages", every_s=0.5)
    assert cluster.stop_all() == {"h1": 0, "h2": 0}


async def test_a_host_killed_while_holding_hint_messages_loses_none(
    account: str, queue: str, cluster: Cluster
) -> None:
    events = _events(await _records(account))
    await _send(account, queue, [queue_text(e) for e in events])
    timeout = ("--hints-visibility-timeout", "2")
    cluster.start("held", *timeout, CFP_TEST_HINT_DELAY_S="600")
    await cluster.logged("held", "test.hints_held")
    cluster.signal("held", signal.SIGKILL)
    assert cluster.wait("held") == -signal.SIGKILL
    assert _hint_lines(cluster) == []  # it held them, and wrote none
    cluster.start("after", *timeout)

    async def settled() -> bool:
        hinted = {d["id"] for d in _hint_lines(cluster)}
        return hinted == {e["id"] for e in events} and await _waiting(account, queue) == 0

    await until(settled, "every hint the killed host held delivered by the other", every_s=0.3)
    assert {d["host"] for d in _hint_lines(cluster)} == {"after"}
    assert cluster.stop_all()["after"] == 0


async def test_an_azurite_restart_mid_run_loses_no_hint_and_no_record(tmp_path: Path) -> None:
    """Azurite (queue, lease table and feed alike) stopped and started again on its ports while
    a host reads hints: the host rides it out (its queue calls are retried), and every hint
    sent before and after the restart is delivered, every message settled."""
    azurite = Azurite(tmp_path / "azurite").start()
    try:
        conn = azurite.connection_string
        queue = f"hints-{uuid.uuid4().hex[:12]}"
        async with connection.queue_client(conn, queue) as q:
            await q.create_queue()
        records = await _records(conn)
        events = _events(records)
        half = len(events) // 2
        await _send(conn, queue, [queue_text(e) for e in events[:half]])
        args = (*quick_host_args(batch=20), "--hints-queue", queue, "--hints-poll-interval", "0.2")
        cluster = Cluster(conn, "hintsrestart", tmp_path / "hosts", args=args)
        try:
            cluster.start("h1")

            async def a_hint() -> bool:
                return bool(_hint_lines(cluster))

            await until(a_hint, "a first hint", every_s=0.2)
            azurite.stop()

            async def the_outage_seen() -> bool:
                return any(e.get("event") == "hints.queue_failed" for e in cluster.log_events("h1"))

            await until(the_outage_seen, "the host's queue calls failing", every_s=0.2)
            await asyncio.to_thread(azurite.start)
            await _send(conn, queue, [queue_text(e) for e in events[half:]])

            settled = _everything_settled(cluster, conn, queue, events, records)
            await until(settled, "every hint and record delivered after the restart", every_s=0.5)
            assert cluster.running() == ["h1"]  # it never stopped
            assert cluster.stop_all() == {"h1": 0}
        finally:
            cluster.kill_all()
    finally:
        azurite.stop()
