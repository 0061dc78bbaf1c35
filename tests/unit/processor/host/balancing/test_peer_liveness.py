"""Live peers from host rows, judged by their stamps changing on the judge's own clock (a
peer's clock may be minutes off), and the count target they give hosts started together."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from leases import HostId, HostReport
from leases.policy.balancing import BalanceLimits, plan_takes
from processor.host.balancing.peer_liveness import PeerLiveness
from tests.unit.leases.policy.test_balancing import table

WALL = datetime(2026, 1, 1, tzinfo=UTC)
EXPIRY = 10.0


def row(name: str, seen: datetime, state: str = "running") -> HostReport:
    return HostReport(HostId(name), state, seen, seen, 0, EXPIRY)


def test_a_fresh_row_is_alive_at_first_sight_and_a_stale_one_is_not() -> None:
    peers = PeerLiveness(HostId("me"), window_s=EXPIRY)
    rows = [
        row("me", WALL),
        row("fresh", WALL - timedelta(seconds=2)),
        row("old", WALL - timedelta(hours=1)),
    ]
    assert peers.update(rows, now=100.0, wall=WALL) == {"fresh"}


def test_a_row_that_changes_is_alive_whatever_its_writers_clock_says() -> None:
    peers = PeerLiveness(HostId("me"), window_s=EXPIRY)
    behind = WALL - timedelta(seconds=300)  # its clock is five minutes slow
    assert peers.update([row("slow", behind)], now=100.0, wall=WALL) == set()
    later = behind + timedelta(seconds=1)
    assert peers.update([row("slow", later)], now=101.0, wall=WALL) == {"slow"}
    # then it stops writing: alive until its stamp has not changed for an expiry
    assert peers.update([row("slow", later)], now=101.0 + EXPIRY, wall=WALL) == {"slow"}
    assert peers.update([row("slow", later)], now=102.0 + EXPIRY, wall=WALL) == set()


def test_a_host_stopping_or_failed_is_no_peer() -> None:
    peers = PeerLiveness(HostId("me"), window_s=EXPIRY)
    rows = [
        row(n, WALL, state)
        for n, state in (
            ("a", "draining"),
            ("b", "stopped"),
            ("c", "failed permanently"),
            ("d", "starting"),
        )
    ]
    assert peers.update(rows, now=0.0, wall=WALL) == {"d"}


@given(st.integers(1, 40), st.integers(2, 6), st.randoms(use_true_random=False))
def test_hosts_started_together_each_take_at_most_their_share(
    leases: int, hosts: int, rng: random.Random
) -> None:
    """Every host of a fresh processor knows the others from their rows: whoever ticks first
    takes its share, not everything."""
    names = [HostId(f"h{i}") for i in range(hosts)]
    views = table(free=leases)
    for me in names:
        plan = plan_takes(
            views, me=me, limits=BalanceLimits(max_acquire=leases), rng=rng, peers=set(names) - {me}
        )
        assert len(plan.acquire) <= math.ceil(leases / hosts)
    alone = plan_takes(views, me=names[0], limits=BalanceLimits(max_acquire=leases), rng=rng)
    assert len(alone.acquire) == leases  # without them, it would take everything
