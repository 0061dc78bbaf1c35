"""How far behind a lease is, from what its owner knows (`/status`, metrics) or what its row
says (`cfp status`): one arithmetic for both."""

from __future__ import annotations

from datetime import datetime


def time_lag_s(last_event: datetime | None, *, caught_up: bool, now: datetime) -> float | None:
    """Now minus the time of the last event delivered (or checkpointed); 0 once caught up
    (nothing is waiting, however old that event is); None before any event."""
    if caught_up:
        return 0.0
    return None if last_event is None else max(0.0, (now - last_event).total_seconds())


def events_left(bytes_left: int | None, *, events: int, event_bytes: int) -> int | None:
    """Bytes left to read over the bytes per event read so far; None when either is unknown
    (nothing read yet, or events that read no feed bytes: an initial scan's)."""
    if bytes_left is None or not events or not event_bytes:
        return None
    return round(bytes_left * events / event_bytes)
