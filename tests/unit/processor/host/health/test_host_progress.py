"""The stuck-lease signals: when a lease counts as stuck, and what /metrics says of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import generate_latest

from leases import LeaseToken
from observers import Outage, SinkHealth
from processor.host.health.host_progress import HostProgress
from tests.helpers import metric

T0 = datetime(2026, 11, 25, tzinfo=UTC)
A, B = LeaseToken("00"), LeaseToken("01")


class Wall:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def pass_s(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def metrics(p: HostProgress) -> str:
    return generate_latest(p.registry).decode()


def test_an_observer_failing_for_stuck_after_makes_the_lease_stuck_until_a_success() -> None:
    wall = Wall()
    host = HostProgress(wall=wall, stuck_after_s=60)
    p = host.leases
    p.started(A, 1, None)
    p.observer_failed(A)
    wall.pass_s(59)
    p.observer_failed(A)
    assert p.stuck() == {}
    wall.pass_s(1)
    assert p.stuck() == {A: "the observer has failed 2 times in a row; no progress for 60 s"}
    assert 'cfp_lease_stuck{lease="00"} 1.0' in metrics(host)
    assert 'cfp_observer_consecutive_failures{lease="00"} 2.0' in metrics(host)
    p.delivered(A, events=3, read_bytes=10, last_event_time=None)
    assert p.stuck() == {} and 'cfp_observer_consecutive_failures{lease="00"} 0.0' in metrics(host)


def test_a_lease_stuck_stays_stuck_when_its_observer_fails_and_the_reason_says_so() -> None:
    """On a busy machine the observer's first failure may come after --stuck-after: the lease
    was stuck for no progress, and stays stuck, now for the observer's failures."""
    wall = Wall()
    host = HostProgress(wall=wall, stuck_after_s=3)
    p = host.leases
    p.started(A, 1, None)
    p.delivering(A)
    wall.pass_s(4)  # process_changes has not returned yet
    assert p.stuck() == {A: "no progress for 4 s while not caught up"}
    p.observer_failed(A)
    assert p.stuck() == {A: "the observer has failed 1 time in a row; no progress for 4 s"}
    wall.pass_s(1)
    p.observer_failed(A)
    assert p.stuck() == {A: "the observer has failed 2 times in a row; no progress for 5 s"}
    assert 'cfp_lease_stuck{lease="00"} 1.0' in metrics(host)


def test_no_progress_while_not_caught_up_is_stuck_waiting_is_not() -> None:
    wall = Wall()
    host = HostProgress(wall=wall, stuck_after_s=60)
    p = host.leases
    p.started(A, 1, None)
    p.started(B, 1, None)
    p.checkpointed(B, "{}", caught_up=True, seconds=0.01)
    wall.pass_s(30)
    p.waiting(A)  # at the segment barrier: no fault of its own
    wall.pass_s(59)
    assert p.stuck() == {}
    wall.pass_s(1)
    assert p.stuck() == {A: "no progress for 60 s while not caught up"}  # B is caught up
    assert 'cfp_seconds_since_checkpoint{lease="01"} 90.0' in metrics(host)
    assert 'cfp_seconds_since_checkpoint{lease="00"} 90.0' in metrics(host)  # since taken
    p.checkpointed(A, "{}", caught_up=False, seconds=0.01)
    assert p.stuck() == {}
    status = {x["lease"]: x for x in p.to_json()}
    assert status["00"]["state"] == "reading" and status["00"]["stuck"] is False


def test_unowned_leases_are_reported_once_known() -> None:
    host = HostProgress()
    assert "\ncfp_leases_unowned " not in metrics(host)
    host.balancing.unowned = 3
    assert "\ncfp_leases_unowned 3.0" in metrics(host)


def test_a_lease_taken_caught_up_is_not_stuck_on_a_quiet_feed() -> None:
    """Its checkpoint already says caught up, so none is written: the worker says so."""
    wall = Wall()
    host = HostProgress(wall=wall, stuck_after_s=60)
    p = host.leases
    p.started(A, 1, None)
    p.caught_up(A)
    wall.pass_s(3600)  # an hour without a new segment
    assert p.stuck() == {} and p.to_json()[0]["state"] == "caught up"


def test_a_dead_lettered_batch_ends_the_failures() -> None:
    wall = Wall()
    host = HostProgress(wall=wall, stuck_after_s=60)
    p = host.leases
    p.started(A, 1, None)
    p.observer_failed(A)
    wall.pass_s(120)
    assert A in p.stuck()
    p.dead_lettered(A)
    assert p.stuck() == {} and p.entries[A].failures == 0
    assert "cfp_dead_letters_total 1.0" in metrics(host)


def test_an_observer_that_never_returns_makes_a_caught_up_lease_stuck() -> None:
    wall = Wall()
    host = HostProgress(wall=wall, stuck_after_s=60)
    p = host.leases
    p.started(A, 1, None)
    p.caught_up(A)
    wall.pass_s(7200)  # caught up for hours, then a new segment
    p.delivering(A)
    assert p.stuck() == {}  # counted from the delivery, not from the last checkpoint
    wall.pass_s(60)  # process_changes has not returned
    assert p.stuck() == {A: "no progress for 60 s while not caught up"}


def test_the_processor_wide_writing_gauge_counts_only_leases_with_work() -> None:
    """`cfp_seconds_since_progress`: since the lease with work that moved last was checkpointed,
    or had work again after being caught up; absent while no lease has work."""
    wall = Wall()
    host = HostProgress(wall=wall, stuck_after_s=60, processor="p")
    p = host.leases
    assert "cfp_seconds_since_progress{" not in metrics(host)  # no lease at all
    assert 'cfp_stuck_after_seconds{processor="p"} 60.0' in metrics(host)
    p.started(A, 1, None)
    p.started(B, 1, None)
    wall.pass_s(30)
    p.checkpointed(B, "{}", caught_up=True, seconds=0.01)  # B has nothing left to write
    wall.pass_s(600)
    assert p.seconds_unwritten() == 630  # A, taken 630 s ago, never written
    assert 'cfp_seconds_since_progress{processor="p"} 630.0' in metrics(host)
    p.delivering(B)  # B has work again: it waits from now, not from its last checkpoint
    assert p.seconds_unwritten() == 0
    wall.pass_s(10)
    p.checkpointed(A, "{}", caught_up=True, seconds=0.01)
    p.checkpointed(B, "{}", caught_up=True, seconds=0.01)
    assert p.seconds_unwritten() is None
    assert "cfp_seconds_since_progress{" not in metrics(host)


def test_the_observer_s_outage_is_a_metric() -> None:
    outage: list[Outage | None] = [None]
    host = HostProgress(wall=Wall(), sink=lambda: SinkHealth(outage[0]))
    assert "\ncfp_observer_unavailable 0.0\n" in metrics(host)
    assert "\ncfp_observer_unavailable_since_timestamp_seconds " not in metrics(host)
    outage[0] = Outage("spark", T0, "sc://a:15002: no answer")
    assert "\ncfp_observer_unavailable 1.0\n" in metrics(host)
    since = metric(metrics(host), "cfp_observer_unavailable_since_timestamp_seconds")
    assert since == T0.timestamp()
    quiet = HostProgress(wall=Wall())  # an observer that reports nothing: no sample
    assert "\ncfp_observer_unavailable " not in metrics(quiet)
