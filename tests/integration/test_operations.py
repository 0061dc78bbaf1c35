"""Running a processor for months, with real hosts on Azurite: a filter fixed at creation, a
bounded run that finishes at its end time, a reset that rewinds a paused processor (and that a
zombie cannot checkpoint over), and a poison batch reported STUCK.

Each test emulates a small feed (segments an hour apart from 2026-01-01) and runs real
`cfp run` processes with the JSON-lines test observer.
"""

from __future__ import annotations

import asyncio
import fnmatch
import itertools
import json
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from processor.changefeed.change_filter import blob_path
from processor.changefeed.selection import parse_event_time
from processor.reading.lease_position import LeasePosition
from tests.cluster import Cluster, quick_host_args
from tests.helpers import emulate, get_text, read_all, until

ARGS = quick_host_args(batch=8, observer="tests.plugins:PoisonJsonl")
_processors = itertools.count()

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
async def cluster(account: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(account, f"ops{next(_processors)}", tmp_path, args=ARGS)
    try:
        yield c
    finally:
        c.kill_all()


FEED: dict[str, Any] = {
    "seed": 19,
    "segments": 4,
    "events_per_segment": 120,
    "shards": (2, 3, 2, 2),
    "block_events": (3, 9),
    "feed_only": True,
}


async def _emulate(account: str, **changes: Any) -> int:
    """Emulate the feed; the wall time (ns) it was done: its last segment consumable."""
    await emulate(account, **(FEED | changes))
    return time.time_ns()


async def _feed(account: str, **changes: Any) -> list[dict[str, Any]]:
    """Emulate the feed; its non-Control records, in feed order."""
    await _emulate(account, **changes)
    records, _ = await read_all(account)
    return records


async def test_a_filtered_processor_delivers_exactly_the_matching_events(
    account: str, cluster: Cluster
) -> None:
    records = await _feed(account)
    globs = ("cfp-emu-[02]", "nothing-*")

    def matches(r: dict[str, Any]) -> bool:
        where = blob_path(r["subject"])
        return (
            where is not None
            and any(fnmatch.fnmatchcase(where[0], g) for g in globs)
            and where[1].startswith("data/")
            and r["eventType"] in ("BlobCreated", "BlobDeleted")
            and r["data"]["blobType"] == "BlockBlob"
        )

    expected = {str(r["id"]) for r in records if matches(r)}
    assert 0 < len(expected) < len(records) // 2
    options = ("--container", globs[0], "--container", globs[1], "--blob-prefix", "data/")
    # the event types by flag, the blob type by variable (as a container would set it)
    cluster.env["CFP_BLOB_TYPE"] = "BlockBlob"
    types = ("--event-type", "BlobCreated", "--event-type", "BlobDeleted")
    assert await cluster.run_until_caught_up("h1", *options, *types) == 0
    got = cluster.delivered()
    assert set(got) == expected and max(got.values()) == 1
    doc = cluster.status()
    assert doc["identity"]["filter"] == {
        "containers": sorted(globs),
        "blobPrefix": "data/",
        "eventTypes": ["BlobCreated", "BlobDeleted"],
        "blobTypes": ["BlockBlob"],
    }
    assert all(row["caughtUp"] for row in doc["leases"])  # filtered-out events moved them too
    text = cluster.cfp("status").stdout
    assert "delivers filter: container cfp-emu-[02] or nothing-*, blob prefix 'data/'" in text

    # another filter for the same processor name is refused before it touches a lease
    before = {row["lease"]: row["epoch"] for row in doc["leases"]}
    cluster.start("h2", "--container", "cfp-emu-1", *types)
    assert await asyncio.to_thread(cluster.wait, "h2") == 2
    log = (cluster.workdir / "h2.log").read_text()
    assert f"processor '{cluster.processor}'" in log and "was created with filter: container" in log
    assert "this host has filter: container cfp-emu-1" in log and "--processor-name" in log
    assert {row["lease"]: row["epoch"] for row in cluster.status()["leases"]} == before


async def test_an_end_time_ends_every_lease_at_the_right_event(
    account: str, cluster: Cluster
) -> None:
    records = await _feed(account, segments=5, shards=(2, 2, 3, 2, 2))
    times = sorted(parse_event_time(str(r["eventTime"])) for r in records)
    end = times[len(times) // 3]  # inside the second segment
    expected = {str(r["id"]) for r in records if parse_event_time(str(r["eventTime"])) < end}
    assert 0 < len(expected) < len(records)
    assert await cluster.run_until_caught_up("h1", "--end-time", end.isoformat()) == 0
    got = cluster.delivered()
    assert set(got) == expected and max(got.values()) == 1
    doc = cluster.status()
    assert doc["finished"] and doc["identity"]["endTime"] == end.isoformat()
    for row in doc["leases"]:
        position = LeasePosition.from_json(row["continuation"])
        assert row["caughtUp"] and position.finished and position.end_time == end
        assert row["owner"] is None  # released for good
    assert "FINISHED" in cluster.cfp("status").stdout
    # a finished processor is taken by no host again, and delivers nothing more
    assert await cluster.run_until_caught_up("h2", "--end-time", end.isoformat()) == 0
    assert cluster.delivered() == got
    assert not any(e.get("event") == "lease.acquired" for e in cluster.log_events("h2"))


async def test_a_reset_redelivers_from_its_start_time_and_a_zombie_cannot_overwrite_it(
    account: str, cluster: Cluster
) -> None:
    records = await _feed(account, segments=3, shards=(2, 2, 2))
    times = sorted(parse_event_time(str(r["eventTime"])) for r in records)
    rewind = times[len(times) // 2]
    again = {str(r["id"]) for r in records if parse_event_time(str(r["eventTime"])) >= rewind}
    assert await cluster.run_until_caught_up("h1") == 0
    assert set(cluster.delivered()) == {str(r["id"]) for r in records}

    refused = cluster.cfp("processor", "reset", "--from-beginning")
    assert refused.returncode == 2 and "is not paused" in refused.stderr
    assert cluster.cfp("pause").returncode == 0
    assert cluster.cfp("processor", "reset", "--from-beginning").returncode == 0
    assert cluster.cfp("resume").returncode == 0

    # h2 delivers everything again, slowly; a reset is refused while it lives and holds leases
    cluster.env["CFP_TEST_BATCH_DELAY_S"] = "0.4"
    cluster.start("h2")
    await until(lambda: _from(cluster, "h2", 1), "h2 delivering")
    assert cluster.cfp("pause").returncode == 0
    held = cluster.cfp("processor", "reset", "--start-time", rewind.isoformat())
    assert held.returncode == 2 and "live hosts hold leases" in held.stderr
    assert cluster.cfp("resume").returncode == 0

    # frozen with a batch in hand, h2 becomes a zombie; the reset goes through without it
    count = sum(1 for d in cluster.deliveries() if d["host"] == "h2")
    await until(lambda: _from(cluster, "h2", count + 8), "h2 delivering")
    cluster.signal("h2", signal.SIGSTOP)
    assert cluster.cfp("pause").returncode == 0
    epochs = {row["lease"]: row["epoch"] for row in cluster.status()["leases"]}
    reset = cluster.cfp("processor", "reset", "--start-time", rewind.isoformat(), "--reason", "t")
    assert reset.returncode == 0, reset.stderr
    after = {row["lease"]: row for row in cluster.status()["leases"]}
    for token, row in after.items():
        assert row["epoch"] == epochs[token] + 1 and row["owner"] is None
        assert LeasePosition.from_json(row["continuation"]).start_time == rewind
        assert row["moves"][-1]["reason"] == f"reset to events from {rewind.isoformat()}: t"

    cluster.signal("h2", signal.SIGCONT)  # wakes up believing it holds its leases
    await cluster.logged("h2", "worker.stopped", reason="lease_lost")
    cluster.signal("h2", signal.SIGTERM)
    await asyncio.to_thread(cluster.wait, "h2")  # gone: every checkpoint it tried was refused
    for token, row in {r["lease"]: r for r in cluster.status()["leases"]}.items():
        assert row["continuation"] == after[token]["continuation"], token

    assert cluster.cfp("resume").returncode == 0
    cluster.env["CFP_TEST_BATCH_DELAY_S"] = "0"
    assert await cluster.run_until_caught_up("h3") == 0
    from_h3 = Counter(d["id"] for d in cluster.deliveries() if d["host"] == "h3")
    assert set(from_h3) == again and max(from_h3.values()) == 1


async def test_a_quiet_feed_costs_one_request_per_poll_and_a_new_segment_is_delivered(
    account: str, cluster: Cluster
) -> None:
    """32 caught-up leases on one host, a feed where nothing happens for 60 s: the host's storage
    requests are counted (its `cfp_storage_requests_total`, every HTTP request the feed's client
    sent). Then a new segment is published and delivered."""
    records = await _feed(account, segments=1, events_per_segment=400, shards=(32,))
    poll_s = 2.0
    cluster.start("h1", "--poll-interval", str(poll_s))
    url = await cluster.endpoint("h1")

    async def all_caught_up() -> bool:
        status = json.loads(await asyncio.to_thread(get_text, f"{url}/status"))
        leases = status["leases"]
        return len(leases) == 32 and all(x["caughtUp"] for x in leases)

    await until(all_caught_up, "32 leases caught up", every_s=0.5)
    assert set(cluster.delivered()) == {str(r["id"]) for r in records}
    seen: list[float] = []  # the host's total requests, at each change

    async def quiet() -> bool:  # the catch-up's last reads done: one request since, a poll's look
        total = sum(_requests(await asyncio.to_thread(get_text, f"{url}/metrics")).values())
        if not seen or total != seen[-1]:
            seen.append(total)
        return len(seen) >= 2 and seen[-1] - seen[-2] == 1

    await until(quiet, "the catch-up's last requests done", every_s=0.1)
    before = _requests(await asyncio.to_thread(get_text, f"{url}/metrics"))
    quiet_s = 60.0
    await asyncio.sleep(quiet_s)  # fixed on purpose: the quiet window is the measure (per poll)
    after = _requests(await asyncio.to_thread(get_text, f"{url}/metrics"))
    spent = {k: after[k] - before.get(k, 0) for k in after}
    looks = quiet_s / poll_s
    # one read of segments.json per poll interval, for the whole host; no listing at all
    assert sum(spent.values()) <= looks * 1.2 + 2, spent
    assert spent.get("list", 0) == 0, spent

    published = await _emulate(account, segments=1, events_per_segment=60, shards=(32,))
    more, _ = await read_all(account)
    new = {str(r["id"]) for r in more} - {str(r["id"]) for r in records}
    assert new

    async def delivered_new() -> bool:
        return new <= set(cluster.delivered())

    await until(delivered_new, "the new segment delivered", every_s=0.2)
    first = min(d["t"] for d in cluster.deliveries() if d["id"] in new)
    print(f"quiet {quiet_s:.0f} s, poll {poll_s} s: {spent} storage requests")
    print(f"first event of the new segment delivered {(first - published) / 1e9:.2f} s after")


def _requests(metrics: str) -> dict[str, float]:
    """`cfp_storage_requests_total` by kind."""
    prefix = 'cfp_storage_requests_total{kind="'
    out = {}
    for line in metrics.splitlines():
        if line.startswith(prefix):
            kind, _, value = line.removeprefix(prefix).partition('"} ')
            out[kind] = float(value)
    return out


async def _from(cluster: Cluster, host: str, n: int) -> bool:
    """Whether `host` has delivered `n` events or more."""
    return sum(1 for d in cluster.deliveries() if d["host"] == host) >= n


async def test_a_poison_batch_shows_stuck_in_status_metrics_and_status_endpoint(
    account: str, cluster: Cluster
) -> None:
    records = await _feed(account, segments=2, shards=(2, 2))
    poison = str(records[5]["id"])
    cluster.env["CFP_TEST_POISON_IDS"] = poison
    cluster.start("h1", "--stuck-after", "3")
    url = await cluster.endpoint("h1")

    async def stuck_on_the_observer() -> dict[str, Any] | None:
        """`cfp status` once a lease is stuck and its reason names the observer: on a busy
        machine it may be stuck (no progress for --stuck-after) before its first failure is in,
        and the host's row is written every few seconds."""
        doc = cluster.status()
        reasons = [r.get("stuck") or "" for r in doc["leases"]]
        return doc if any("the observer has failed" in why for why in reasons) else None

    doc = await until(stuck_on_the_observer, "a lease reported STUCK on its observer", every_s=1)
    (token,) = doc["stuck"]
    assert "STUCK: the observer has failed" in cluster.cfp("status").stdout

    async def failed_twice() -> str | None:  # a retry on, the lease is still stuck
        text = await asyncio.to_thread(get_text, f"{url}/metrics")
        return text if _sample(text, "cfp_observer_consecutive_failures", token) >= 2 else None

    metrics = await until(failed_twice, "two failures in a row", every_s=0.5)
    assert f'cfp_lease_stuck{{lease="{token}"}} 1.0' in metrics
    assert _sample(metrics, "cfp_seconds_since_checkpoint", token) >= 0
    others = [r["lease"] for r in doc["leases"] if r["lease"] != token]
    assert all(f'cfp_lease_stuck{{lease="{t}"}} 1.0' not in metrics for t in others)
    status = json.loads(await asyncio.to_thread(get_text, f"{url}/status"))
    (lease,) = [x for x in status["leases"] if x["lease"] == token]
    assert lease["stuck"] and lease["state"] == "STUCK" and lease["consecutiveFailures"] >= 2


def _sample(metrics: str, name: str, lease: str) -> float:
    """The value of `name` for `lease`; -1 when the host reports none (it holds no such lease)."""
    prefix = f'{name}{{lease="{lease}"}} '
    line = next((x for x in metrics.splitlines() if x.startswith(prefix)), f"{prefix}-1")
    return float(line.removeprefix(prefix))


async def test_a_host_with_nothing_to_take_says_why_in_status(
    account: str, cluster: Cluster
) -> None:
    """One lease, two hosts: the second runs, holds nothing, and `cfp status` says why (not
    a stuck host); the lease count of each host is the lease table's."""
    await _feed(account, segments=1, shards=(1,))
    cluster.start("h1")

    async def owned_by_h1() -> bool:
        return [row["owner"] for row in cluster.status()["leases"]] == ["h1"]

    await until(owned_by_h1, "h1 holding the lease", every_s=0.5)
    cluster.start("h2")
    why = "nothing to take: 1 lease held by 1 other host"

    async def h2_idle() -> dict[str, Any] | None:
        hosts = {h["host"]: h for h in cluster.status()["hosts"]}
        h2 = hosts.get("h2")
        return h2 if h2 is not None and h2["state"] == "running" and h2["note"] == why else None

    h2 = await until(h2_idle, "h2 running and saying why it is idle", every_s=0.5)
    assert h2["leases"] == 0
    assert f"running ({why})" in cluster.cfp("status").stdout
    assert [row["owner"] for row in cluster.status()["leases"]] == ["h1"]
