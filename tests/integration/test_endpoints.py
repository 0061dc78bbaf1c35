"""A real `cfp run` host's HTTP endpoints through its life: starting, running with metrics that
move as work proceeds, `/status`, its row in `cfp status`, draining on SIGTERM, gone after.
Secrets: the account key of the connection string never appears in any of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from processor.connection import AZURITE_KEY
from processor.emulator.azurite import Azurite, free_port
from processor.host.host_config import DEFAULT_HTTP_PORT
from tests import patience
from tests.cluster import LEASE_TABLE, Cluster, quick_host_args
from tests.deploy_files import dockerfile
from tests.helpers import Feed, emulate_afresh, metric, run_cfp, until

ARGS = quick_host_args(batch=20)

_processors = itertools.count()

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
async def feed(azurite: Azurite) -> Feed:
    records = await emulate_afresh(
        azurite.connection_string, seed=41, segments=2, events_per_segment=900, shards=(2, 3),
        feed_only=True,  # the hosts never look at the blobs
    )  # fmt: skip
    return Feed(azurite.connection_string, {str(r["id"]) for r in records})


@pytest.fixture
async def cluster(feed: Feed, tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(
        feed.conn,
        f"endpoints{next(_processors)}",
        tmp_path,
        args=ARGS,
        env={"CFP_TEST_BATCH_DELAY_S": "0.4"},
    )
    try:
        yield c
    finally:
        c.kill_all()


async def get(http: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with http.get(url) as r:
        return r.status, await r.text()


async def test_endpoints_through_a_hosts_life(cluster: Cluster) -> None:
    cluster.start("h1")
    base = await cluster.endpoint("h1")
    async with aiohttp.ClientSession() as http:
        live, _ = await get(http, f"{base}/healthz")
        assert live == 200  # alive from the start, Spark or not

        async def running() -> bool:
            return (await get(http, f"{base}/readyz"))[0] == 200

        await until(running, "/readyz 200")
        status, body = await get(http, f"{base}/status")
        doc = json.loads(body)
        assert status == 200 and doc["state"] == "running" and doc["host"] == "h1"

        async def all_leases_owned() -> str | None:
            text = (await get(http, f"{base}/metrics"))[1]
            return text if metric(text, "cfp_leases_owned") == 3 else None

        first = await until(all_leases_owned, "3 leases owned")

        async def delivered_more() -> str | None:  # counted, not timed: a busy machine is slow
            text = (await get(http, f"{base}/metrics"))[1]
            more = metric(text, "cfp_events_total") > metric(first, "cfp_events_total")
            sampled = metric(text, "cfp_lag_events") > 0  # the lag is sampled every second
            checkpointed = metric(text, "cfp_checkpoint_seconds_count") > 0
            return text if more and sampled and checkpointed else None

        later = await until(delivered_more, "events delivered after the leases were owned")
        assert metric(later, "cfp_batches_total") > 0
        assert metric(later, "cfp_read_bytes_total") > 0
        assert metric(later, "cfp_checkpoint_seconds_count") > 0
        # each acquisition counted, and logged just after: 3, or more when a host starved
        # under load fenced itself off a lease and took it again (seen in CI)
        logged = sum(1 for e in cluster.log_events("h1") if e.get("event") == "lease.acquired")
        assert 3 <= metric(later, "cfp_leases_acquired_total") <= logged
        assert metric(later, "cfp_host_state", cfp_host_state="running") == 1
        assert metric(later, "cfp_lag_seconds") > 0  # events from the past, not caught up

        async def every_lease_checkpointed() -> dict[str, Any] | None:
            doc = json.loads((await get(http, f"{base}/status"))[1])
            return doc if all("continuation" in x for x in doc["leases"]) else None

        doc = await until(every_lease_checkpointed, "a checkpoint of every lease")
        assert sorted(x["lease"] for x in doc["leases"]) == ["00", "01", "02"]
        assert all(x["events"] >= 0 for x in doc["leases"])

        # the host's own row, as `cfp status` shows it; lag from the lease rows: time behind,
        # and events left from bytes left, once the leases have read some
        async def shown_with_lag() -> dict[str, Any] | None:
            shown = await asyncio.to_thread(
                run_cfp, cluster.conn, "status", "--json", "--processor-name", cluster.processor,
                "--lease-table", LEASE_TABLE,
            )  # fmt: skip
            found: dict[str, Any] = json.loads(shown.stdout)
            moving = [x for x in found["leases"] if x["events"] > 0 and not x["caughtUp"]]
            lagging = all(x["lagSeconds"] > 0 and x["eventsLeft"] is not None for x in moving)
            return found if moving and lagging else None

        shown_doc = await until(shown_with_lag, "cfp status showing the lag", every_s=0.2)
        hosts = shown_doc["hosts"]
        assert [(h["host"], h["state"], h["endpoint"]) for h in hosts] == [("h1", "running", base)]
        assert shown_doc["eventsLeft"] > 0

        # byte lag is sampled every second (the acquire interval): it goes down as work proceeds
        left = metric(later, "cfp_lag_bytes")
        assert left > 0 and metric(later, "cfp_lag_events") > 0
        status_doc = json.loads((await get(http, f"{base}/status"))[1])
        assert status_doc["lagEvents"] > 0 and status_doc["lagBytes"] > 0

        async def less_left() -> bool:
            return metric((await get(http, f"{base}/metrics"))[1], "cfp_lag_bytes") < left

        await until(less_left, "cfp_lag_bytes going down")

        # SIGTERM while batches are in hand: draining, not ready, still alive
        cluster.signal("h1", signal.SIGTERM)
        seen: set[str] = set()
        alive: list[int] = []  # /healthz while draining
        while cluster.procs["h1"].poll() is None:
            try:
                code, body = await get(http, f"{base}/readyz")
                if json.loads(body)["state"] == "draining":
                    alive.append((await get(http, f"{base}/healthz"))[0])
            except aiohttp.ClientError:
                break  # the server closed as the process ended (between two calls, too)
            seen.add(json.loads(body)["state"])
            if json.loads(body)["state"] == "draining":
                assert code == 503
            await asyncio.sleep(0.01)
    assert "draining" in seen, seen
    assert all(c == 200 for c in alive), alive  # draining is alive, each time it answered
    assert await asyncio.to_thread(cluster.wait, "h1") == 0
    shown = await asyncio.to_thread(
        run_cfp, cluster.conn, "status", "--json", "--processor-name", cluster.processor,
        "--lease-table", LEASE_TABLE,
    )  # fmt: skip
    assert json.loads(shown.stdout)["hosts"] == []  # a clean stop removes the row
    states = [e["state"] for e in cluster.log_events("h1") if e.get("event") == "host.state"]
    assert states == ["starting", "running", "draining", "stopped"]
    log_text = (cluster.workdir / "h1.log").read_text()
    assert AZURITE_KEY not in log_text and AZURITE_KEY not in shown.stdout + shown.stderr


async def test_a_taken_port_is_a_clear_error(cluster: Cluster) -> None:
    cluster.start("h1")
    base = await cluster.endpoint("h1")
    port = base.rsplit(":", 1)[1]
    cluster.start("h2", "--http-port", port)
    assert await asyncio.to_thread(cluster.wait, "h2") == 2
    text = (cluster.workdir / "h2.log").read_text()
    assert f"cannot serve the HTTP endpoints on 127.0.0.1:{port}: the port is in use" in text
    # the default port (no flag, no variable) gives way to a free one instead
    with socket.socket() as blocker:
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError):  # already taken by someone else: just as good
            blocker.bind(("127.0.0.1", DEFAULT_HTTP_PORT))
            blocker.listen()
        cluster.start("h3", CFP_HTTP_PORT="")
        other = await cluster.endpoint("h3")
    assert not other.endswith(f":{DEFAULT_HTTP_PORT}")
    assert any(e.get("event") == "http.default_port_taken" for e in cluster.log_events("h3"))


async def test_the_images_entry_point_and_health_check_work_run_directly(
    feed: Feed, tmp_path: Path
) -> None:
    """deploy/Dockerfile's ENTRYPOINT + CMD with its ENV, as the container would run them (only
    the account, a free port, the log observer instead of Spark, and --until-caught-up differ),
    and its HEALTHCHECK command against the running host."""
    image = dockerfile()
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        **image.env,
        "CFP_CONNECTION_STRING": feed.conn,
        "CFP_PROCESSOR_NAME": f"image{next(_processors)}",
        "CFP_LEASE_TABLE": LEASE_TABLE,
        "CFP_HTTP_PORT": str(port),
        "CFP_OBSERVER": "log",  # Spark's start-up is covered by test_spark.py
        "CFP_OUTPUT": str(tmp_path / "tables"),
        "CFP_UNTIL_CAUGHT_UP": "1",
        "CFP_LEASE_EXPIRATION": "3",
    }
    command = [str(Path(sys.executable).parent / image.entrypoint[0]), *image.entrypoint[1:]]
    log = (tmp_path / "host.log").open("wb")
    host = subprocess.Popen([*command, *image.cmd], env=env, stdout=log, stderr=log)
    try:
        healthy = False
        while host.poll() is None and not healthy:
            check = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, *image.healthcheck[1:]],
                env=env,
                capture_output=True,
                text=True,
            )
            healthy = check.returncode == 0 and '"ok": true' in check.stdout
            await asyncio.sleep(0.1)
        assert healthy, (tmp_path / "host.log").read_text()[-2000:]
        assert await asyncio.to_thread(host.wait, patience.left_s()) == 0
    finally:
        host.kill()
        host.wait()
    lines = [json.loads(x) for x in (tmp_path / "host.log").read_text().splitlines()]
    assert any(x.get("event") == "processor.caught_up" for x in lines)  # JSON logs: CFP_LOG_JSON


async def test_pause_holds_leases_idle_across_restarts_until_resume(
    cluster: Cluster, feed: Feed
) -> None:
    for name in ("h1", "h2"):
        cluster.start(name)
    urls = {n: await cluster.endpoint(n) for n in ("h1", "h2")}

    async def some_delivered() -> bool:
        return len(cluster.deliveries()) >= 60

    await until(some_delivered, "deliveries")
    manage = ("--processor-name", cluster.processor, "--lease-table", LEASE_TABLE)
    paused = await asyncio.to_thread(run_cfp, cluster.conn, "pause", *manage, "--reason", "upgrade")
    assert paused.returncode == 0, paused.stderr
    async with aiohttp.ClientSession() as http:

        async def all_paused() -> bool:
            for url in urls.values():
                code, body = await get(http, f"{url}/readyz")
                if json.loads(body)["state"] != "paused":
                    return False
                assert code == 200  # paused is ready: the lease store answers
            return True

        await until(all_paused, "both hosts paused")
        status: dict[str, Any] = {}

        async def all_held() -> bool:  # a hand-over under way when the pause came completes
            shown = await asyncio.to_thread(run_cfp, cluster.conn, "status", "--json", *manage)
            status.update(json.loads(shown.stdout))
            return all(x["owner"] for x in status["leases"])

        await until(all_held, "every lease held while paused")
        window: list[int] = []  # deliveries so far, and h1's ticks when that count was first seen

        async def batches_in_hand_done() -> bool:  # no delivery while h1 made two ticks
            n, t = len(cluster.deliveries()), await cluster.ticks("h1")
            if not window or window[0] != n:
                window[:] = [n, t]
            return t >= window[1] + 2

        await until(batches_in_hand_done, "the batches in hand at the pause delivered")
        before = len(cluster.deliveries())
        owned = {(x["lease"], x["owner"], x["epoch"]) for x in status["leases"]}
        assert status["paused"] is True and status["pauseReason"] == "upgrade"
        assert {h["state"] for h in status["hosts"]} == {"paused"}

        # a host restarted while paused starts paused (the switch is in the lease table)
        cluster.signal("h2", signal.SIGTERM)
        assert await asyncio.to_thread(cluster.wait, "h2") == 0
        first_run = len(cluster.log_events("h2"))
        cluster.start("h2")
        await cluster.logged("h2", "processor.paused", since=first_run)
        # past the expiry (3 s): h1's ticks come at least 0.8 s apart (or at a lease's expiry),
        # so five span it and the tick after it; the new h2 balances (paused) too. Nothing
        # moves, nothing is delivered.
        h1_at = await cluster.ticks("h1")

        async def an_expiry_later() -> bool:
            restarted = await cluster.ticks("h2", since=first_run)
            return await cluster.ticks("h1") >= h1_at + 5 and restarted >= 2

        await until(an_expiry_later, "h1 and the restarted h2 ticking past the expiry")
        assert len(cluster.deliveries()) == before
        shown = await asyncio.to_thread(run_cfp, cluster.conn, "status", "--json", *manage)
        after = {(x["lease"], x["owner"], x["epoch"]) for x in json.loads(shown.stdout)["leases"]}
        assert {x for x in after if x[1] == "h1"} == {x for x in owned if x[1] == "h1"}
        # nobody took a lease while paused: h2's wait, free (or, when the stopping h2 could not
        # release one in time, as under CI's load once, it waits under its old owner and epoch
        # for its expiry)
        taken = {x for x in after if x[1] is not None and x not in owned}
        assert not taken, f"taken while paused: {taken}, held before: {owned}"

    resumed = await asyncio.to_thread(run_cfp, cluster.conn, "resume", *manage)
    assert resumed.returncode == 0, resumed.stderr

    async def everything() -> bool:
        return {d["id"] for d in cluster.deliveries()} >= feed.ids

    await until(everything, "every event after resume", every_s=0.5)
