"""The probes built on the host's lifecycle, and the endpoints that answer them."""

from __future__ import annotations

from datetime import UTC, datetime

from aiohttp.test_utils import TestClient, TestServer

from observers import Outage, SinkHealth
from processor.host.health.endpoints import HostHealth, make_app
from processor.host.health.host_progress import HostProgress
from processor.host.health.lifecycle import HostState, Lifecycle

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def health(state: HostState, *, loop_age: float | None, silent: float | None) -> HostHealth:
    life = Lifecycle(clock=lambda: 0.0, state=state, error="boom" if state.is_final else "")
    return HostHealth(
        host_name="h",
        processor="p",
        lifecycle=life,
        progress=HostProgress(wall=lambda: T0),
        expiry_s=30,
        stall_after_s=120,
        loop_age_s=lambda: loop_age,
        store_silent_s=lambda: silent,
    )


def test_probes() -> None:
    assert health(HostState.STARTING, loop_age=None, silent=None).liveness()[0]
    assert not health(HostState.STARTING, loop_age=None, silent=None).readiness()[0]
    assert health(HostState.RUNNING, loop_age=1, silent=1).readiness()[0]
    ok, why = health(HostState.RUNNING, loop_age=1, silent=31).readiness()
    assert not ok and "lease store" in why
    ok, why = health(HostState.RUNNING, loop_age=121, silent=1).liveness()
    assert not ok and "balancing loop" in why
    assert health(HostState.DRAINING, loop_age=500, silent=500).liveness()[0]
    assert not health(HostState.DRAINING, loop_age=1, silent=1).readiness()[0]
    ok, why = health(HostState.FAILED_PERMANENTLY, loop_age=1, silent=1).liveness()
    assert not ok and "boom" in why


async def test_endpoints_answer_with_the_probe_codes() -> None:
    h = health(HostState.FAILED_PERMANENTLY, loop_age=1, silent=1)
    async with TestClient(TestServer(make_app(h))) as client:
        r = await client.get("/healthz")
        assert r.status == 503 and (await r.json())["state"] == "failed permanently"
        assert (await client.get("/readyz")).status == 503
        assert (await client.get("/status")).status == 200
        r = await client.get("/metrics")
        assert r.status == 200 and "cfp_leases_owned 0.0" in await r.text()


def test_an_observer_whose_destination_is_away_makes_the_host_unready_not_dead() -> None:
    outage = Outage("spark", T0, "sc://a:15002: Connection refused")
    sink = SinkHealth(outage, {"remote": "sc://a:15002", "pendingRows": 12})
    h = health(HostState.RUNNING, loop_age=1, silent=1)
    h.sink = lambda: sink
    ok, why = h.readiness()
    assert not ok and why == "spark unavailable since 2026-11-23T12:00:00Z: sc://a:15002: " + (
        "Connection refused"
    )
    assert h.liveness()[0]  # a restart would not bring the server back
    doc = h.status()
    assert doc["outage"] == why
    assert doc["sink"] == {
        "available": False,
        "unavailableSince": T0.isoformat(),
        "reason": "sc://a:15002: Connection refused",
        "remote": "sc://a:15002",
        "pendingRows": 12,
    }
    h.sink = lambda: SinkHealth(None, {"remote": "sc://b:15002"})
    assert h.readiness() == (True, "running")
    assert h.status()["outage"] is None and h.status()["sink"]["available"] is True
