"""A lease's progress as its host knows it: time lag, and events left at its own average."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from leases import LeaseToken
from observers import CloseReason
from processor.host.health.host_progress import HostProgress

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


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
