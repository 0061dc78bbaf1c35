"""The host lifecycle table, the probes built on it, and the per-lease progress numbers."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from leases import LeaseToken
from observers import CloseReason
from processor.host.balancing.tick_watch import store_health
from processor.host.health.endpoints import HostHealth, make_app
from processor.host.health.host_progress import HostProgress
from processor.host.health.lifecycle import MOVES, HostState, Lifecycle, may_move

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


@given(st.lists(st.sampled_from(list(HostState)), max_size=30))
def test_a_lifecycle_only_moves_along_the_table(targets: list[HostState]) -> None:
    life = Lifecycle(clock=lambda: 0.0)
    seen = [life.state]
    for to in targets:
        before = life.state
        moved = life.move(to)
        assert moved == may_move(before, to)
        assert life.state == (to if moved else before)
        if life.state != seen[-1]:
            seen.append(life.state)
    for a, b in itertools.pairwise(seen):
        assert b in MOVES[a]
    assert all(not MOVES[s] for s in HostState if s.is_final)


def test_a_late_failure_does_not_undo_draining() -> None:
    life = Lifecycle(clock=lambda: 0.0)
    for s in (HostState.STARTING, HostState.RUNNING, HostState.DRAINING):
        assert life.move(s)
    assert not life.move(HostState.FAILED, error="store silent")
    assert not life.move(HostState.RUNNING)
    assert life.state is HostState.DRAINING and life.error == ""


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


def test_lag_is_event_time_behind_until_caught_up() -> None:
    now = [T0]
    host = HostProgress(wall=lambda: now[0])
    p = host.leases
    token = LeaseToken("00")
    p.started(token, 3, None)
    assert p.entries[token].lag_seconds(T0) == 0  # nothing delivered yet
    p.delivered(token, events=5, read_bytes=100, last_event_time=T0 - timedelta(seconds=90))
    assert p.entries[token].lag_seconds(T0) == 90
    p.checkpointed(token, "{}", caught_up=True, seconds=0.01)
    assert p.entries[token].lag_seconds(T0) == 0 and p.entries[token].bytes_left == 0
    p.ended(token, CloseReason.HANDED_OVER)
    assert p.entries == {}
    assert p.closed.labels("handed_over")._value.get() == 1


def test_status_estimates_events_left_and_time_lag_from_the_lease_row() -> None:
    from leases import Lease
    from processor.admin.report import LeaseStatus, render_totals

    lease = Lease(
        LeaseToken("00"), events=100, event_bytes=50_000, last_event_time=T0 - timedelta(hours=2)
    )
    row = LeaseStatus(lease, None, 10_000)
    assert row.events_left() == 20  # 10,000 bytes at 500 bytes per event
    assert row.lag_seconds(T0) == 7200
    done = LeaseStatus(Lease(LeaseToken("01"), caught_up=True), None, 0)
    assert done.events_left() is None and done.lag_seconds(T0) == 0
    unknown = LeaseStatus(Lease(LeaseToken("02")), None, None)
    assert unknown.lag_seconds(T0) is None
    scan = LeaseStatus(Lease(LeaseToken("scan-00"), events=40, event_bytes=0), None, 0)
    assert scan.events_left() is None  # backfill events read no feed bytes: no average
    text = render_totals([row, done, unknown], T0)
    assert text == "left up to lastConsumable: 9.8KiB+?, about 20 events; largest time lag 2.0h"


def test_host_lag_in_events_uses_its_own_average() -> None:
    host = HostProgress(wall=lambda: T0)
    p = host.leases
    token = LeaseToken("00")
    entry = p.started(token, 1, None)
    entry.bytes_left = 3000
    assert entry.lag_events() is None  # no average yet
    p.delivered(token, events=10, read_bytes=1000, last_event_time=None)
    assert entry.lag_events() == 30
    entry.bytes_left = 0
    assert entry.lag_events() == 0


def test_a_tick_stuck_on_the_feed_does_not_count_as_the_store_answering() -> None:
    """The listing answered at 10 s; the feed then failed until 15 s (connections dropped): the
    store has been silent for 5 s, more than the 3 s expiry."""
    ok_at, failure = store_health(
        now=15.0, ok_at=9.0, answered_at=10.0, store_error=None, expiry_s=3.0
    )
    assert ok_at == 10.0 and failure == "the lease store has not answered for 5.0 s"
    ok_at, failure = store_health(
        now=12.0, ok_at=9.0, answered_at=12.0, store_error=None, expiry_s=3.0
    )
    assert (ok_at, failure) == (12.0, None)
    ok_at, failure = store_health(
        now=13.0, ok_at=9.0, answered_at=12.0, store_error="listing: reset", expiry_s=3.0
    )
    assert (ok_at, failure) == (9.0, "listing: reset")  # a failed listing is not an answer
