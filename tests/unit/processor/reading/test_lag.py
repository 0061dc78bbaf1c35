"""The lag arithmetic `/status`, the metrics and `cfp status` share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from processor.reading.lag import events_left, time_lag_s

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_time_lag_is_zero_once_caught_up_and_unknown_before_any_event() -> None:
    hour_ago = NOW - timedelta(hours=1)
    assert time_lag_s(hour_ago, caught_up=False, now=NOW) == 3600.0
    assert time_lag_s(hour_ago, caught_up=True, now=NOW) == 0.0
    assert time_lag_s(None, caught_up=False, now=NOW) is None
    assert time_lag_s(NOW + timedelta(seconds=5), caught_up=False, now=NOW) == 0.0  # skewed


def test_events_left_from_bytes_per_event_so_far() -> None:
    assert events_left(1000, events=10, event_bytes=500) == 20
    assert events_left(0, events=10, event_bytes=500) == 0
    assert events_left(0, events=40, event_bytes=0) is None  # a scan's: no feed bytes read
    assert events_left(1000, events=0, event_bytes=0) is None  # nothing to go by yet
    assert events_left(None, events=10, event_bytes=500) is None
