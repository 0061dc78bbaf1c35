"""What one lease did on this host since it took it: the numbers `/status` shows of it, and from
which its per-lease gauges and its stuck verdict are computed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from leases import LeaseToken
from processor.reading.lag import events_left, time_lag_s


@dataclass(slots=True)
class LeaseProgress:
    token: LeaseToken
    epoch: int
    started_at: datetime
    continuation: str | None  # as last checkpointed
    events: int = 0
    batches: int = 0
    bytes_read: int = 0
    read_share: int = 0  # bytes read, each block spread over its records (the load's measure)
    last_event_time: datetime | None = None  # of the last event the observer accepted
    checkpointed_at: datetime | None = None
    caught_up: bool = False
    bytes_left: int | None = None  # sampled every few seconds; None until known
    failures: int = 0  # the observer's failures on the batch in hand, in a row
    failing_since: datetime | None = None  # the first of them
    moved_at: datetime | None = None  # last delivery or checkpoint, or a wait that is no fault
    busy_since: datetime | None = None  # when it last had work again after being caught up

    def seconds_since_checkpoint(self, now: datetime) -> float:
        """Since the last checkpoint this host wrote (since it took the lease, before any)."""
        return max(0.0, (now - (self.checkpointed_at or self.started_at)).total_seconds())

    def seconds_unwritten(self, now: datetime) -> float:
        """Since the lease's observer last had a batch checkpointed, or since the lease had work
        (taken, or caught up no more), whichever came last: how long work waits unwritten."""
        since = max(
            self.checkpointed_at or self.started_at,
            self.busy_since or self.started_at,
        )
        return max(0.0, (now - since).total_seconds())

    def stuck_reason(self, now: datetime, after_s: float) -> str | None:
        """Why the lease counts as stuck, None when it is not: it has work and has not moved
        for `after_s` or longer (a wait at the segment barrier or while paused is no fault of
        its own, and not counted). One measure, whatever holds it up: a verdict that changed
        measure when the observer's first failure came in would clear a stuck lease for a
        while; the reason names the observer's failures as soon as there are any."""
        if self.caught_up:  # a batch handed over is work (`delivering`), failed or not
            return None
        still = (now - (self.moved_at or self.started_at)).total_seconds()
        if still < after_s:
            return None
        if self.failing_since is not None:
            n = self.failures
            failed = f"the observer has failed {n} time{'s' * (n != 1)} in a row"
            return f"{failed}; no progress for {still:.0f} s"
        return f"no progress for {still:.0f} s while not caught up"

    def lag_seconds(self, now: datetime) -> float:
        """The time lag of the last delivered event (0 before anything was delivered)."""
        return time_lag_s(self.last_event_time, caught_up=self.caught_up, now=now) or 0.0

    def lag_events(self) -> int | None:
        """Bytes left over this host's bytes per delivered event on the lease (0 when no byte
        is left, average or not)."""
        if self.bytes_left == 0:
            return 0
        return events_left(self.bytes_left, events=self.events, event_bytes=self.bytes_read)

    def to_json(self, now: datetime, stuck_after_s: float) -> dict[str, object]:
        stuck = self.stuck_reason(now, stuck_after_s)
        return {
            "lease": self.token,
            "epoch": self.epoch,
            "ownedSince": self.started_at.isoformat(),
            "continuation": self.continuation,
            "events": self.events,
            "batches": self.batches,
            "bytesRead": self.bytes_read,
            "lastEventTime": self.last_event_time.isoformat() if self.last_event_time else None,
            "lastCheckpoint": self.checkpointed_at.isoformat() if self.checkpointed_at else None,
            "caughtUp": self.caught_up,
            "state": "STUCK" if stuck else "caught up" if self.caught_up else "reading",
            "stuck": stuck is not None,
            "stuckReason": stuck,
            "consecutiveFailures": self.failures,
            "secondsSinceCheckpoint": round(self.seconds_since_checkpoint(now), 3),
            "lagSeconds": round(self.lag_seconds(now), 3),
            "lagBytes": self.bytes_left,
            "lagEvents": self.lag_events(),
        }
