"""What the workers report of their leases, as /status and /metrics read it back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry, generate_latest

from leases import LeaseToken
from observers import CloseReason
from processor.host.health.lease_recorder import LeaseRecorder

A, B = LeaseToken("00"), LeaseToken("01")
START = datetime(2026, 1, 1, tzinfo=UTC)


class Wall:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def recorder() -> tuple[LeaseRecorder, Wall, CollectorRegistry]:
    wall, registry = Wall(), CollectorRegistry()
    return LeaseRecorder(registry, wall=wall, stuck_after_s=60), wall, registry


def test_deliveries_count_per_lease_and_for_the_host() -> None:
    leases, _, registry = recorder()
    leases.started(A, 1, None)
    leases.delivered(A, events=10, read_bytes=1000, last_event_time=START, read_share=900)
    leases.delivered(A, events=5, read_bytes=500, last_event_time=None)
    leases.delivered(B, events=7, read_bytes=70, last_event_time=None)  # not held: ignored
    assert leases.total_events == 15 and leases.read_so_far(A) == 900
    assert leases.read_so_far(B) is None
    (entry,) = leases.to_json()
    assert entry["events"] == 15
    metrics = generate_latest(registry).decode()
    assert 'cfp_events_total{lease="00"} 15.0' in metrics
    assert 'cfp_read_bytes_total{lease="00"} 1500.0' in metrics


def test_lag_is_what_is_left_at_the_bytes_per_event_read_so_far() -> None:
    leases, _, _ = recorder()
    leases.started(A, 1, None)
    leases.started(B, 1, None)
    leases.delivered(A, events=10, read_bytes=1000, last_event_time=None)
    leases.entries[A].bytes_left = 500
    leases.entries[B].bytes_left = 200  # nothing read yet: bytes known, events not
    assert leases.lag() == (700, 5)
    leases.caught_up(A)
    assert leases.lag() == (200, 0)


def test_a_lease_with_work_and_no_progress_is_stuck_and_says_why() -> None:
    leases, wall, _ = recorder()
    leases.started(A, 1, None)
    leases.delivering(A)
    leases.observer_failed(A)
    leases.observer_failed(A)
    wall.now += timedelta(seconds=59)
    assert leases.stuck() == {}
    wall.now += timedelta(seconds=1)
    assert leases.stuck() == {A: "the observer has failed 2 times in a row; no progress for 60 s"}
    leases.dead_lettered(A)  # the lease moves on: its failures are over
    assert leases.stuck() == {}


def test_an_ended_lease_leaves_no_entry_and_counts_its_reason() -> None:
    leases, _, registry = recorder()
    leases.started(A, 1, None)
    leases.checkpointed(A, '{"segment":null}', caught_up=True, seconds=0.01)
    assert leases.entries[A].caught_up and leases.entries[A].bytes_left == 0
    leases.gap_stepped()
    leases.ended(A, CloseReason.HANDED_OVER)
    assert leases.entries == {} and leases.to_json() == []
    metrics = generate_latest(registry).decode()
    assert 'cfp_leases_closed_total{reason="handed_over"} 1.0' in metrics
    assert "cfp_gaps_total 1.0" in metrics
