"""What the workers report of their leases (started, delivered, checkpointed, ended) and nothing
else reads of their internals. Counters go to Prometheus as they happen; per-lease gauges (lag,
position, stuck) are computed at scrape time from the live entries, so a lease that left the
host leaves no stale series."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from leases import LeaseToken
from observers import CloseReason
from processor.host.health.freshness import EventAges
from processor.host.health.lease_progress import LeaseProgress

CHECKPOINT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LeaseRecorder:
    """Every lease this host works on now, and the counters of all it ever held."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        wall: Callable[[], datetime],
        stuck_after_s: float,
        ages: EventAges | None = None,
    ) -> None:
        self._wall = wall
        self.ages = ages or EventAges()  # how old the delivered events were (the host's own)
        self.stuck_after_s = stuck_after_s
        self.entries: dict[LeaseToken, LeaseProgress] = {}
        self.total_events = 0  # over every lease this host ever held (leases come and go)
        r = registry
        self.events = Counter(
            "cfp_events", "Events accepted by the observer.", ["lease"], registry=r
        )
        self.batches = Counter(
            "cfp_batches", "Batches accepted by the observer.", ["lease"], registry=r
        )
        self.bytes_read = Counter(
            "cfp_read_bytes", "Change feed bytes read (Avro blocks).", ["lease"], registry=r
        )
        self.closed = Counter(
            "cfp_leases_closed",
            "Leases this host stopped working on, by reason (handed_over, lease_lost, "
            "shutdown, feed_error, observer_error).",
            ["reason"],
            registry=r,
        )
        self.checkpoint_seconds = Histogram(
            "cfp_checkpoint_seconds",
            "Time to write one checkpoint into the lease table.",
            buckets=CHECKPOINT_BUCKETS,
            registry=r,
        )
        self.dead_letters = Counter(
            "cfp_dead_letters", "Batches written to the dead-letter folder.", registry=r
        )
        self.gaps = Counter(
            "cfp_gaps",
            "Retention gaps stepped over: a lease's data was deleted before it was read.",
            registry=r,
        )
        for reason in CloseReason:
            self.closed.labels(reason.value)
        r.register(_LeaseGauges(self))

    def now(self) -> datetime:
        return self._wall()

    def started(self, token: LeaseToken, epoch: int, continuation: str | None) -> LeaseProgress:
        entry = LeaseProgress(token, epoch, self._wall(), continuation)
        self.entries[token] = entry
        return entry

    def delivered(
        self,
        token: LeaseToken,
        *,
        events: int,
        read_bytes: int,
        last_event_time: datetime | None,
        read_share: int = 0,
    ) -> None:
        entry = self.entries.get(token)
        if entry is None:
            return
        entry.events += events
        entry.read_share += read_share
        entry.batches += 1
        entry.failures, entry.failing_since = 0, None
        entry.moved_at = self._wall()
        self.total_events += events
        _has_work(entry, entry.moved_at)
        if last_event_time is not None:
            entry.last_event_time = last_event_time
        self.events.labels(token).inc(events)
        self.batches.labels(token).inc()
        self.add_read(token, read_bytes)

    def delivering(self, token: LeaseToken) -> None:
        """A batch goes to the observer: the lease has work (an observer that never returns
        makes it stuck), counted from now."""
        entry = self.entries.get(token)
        if entry is not None:
            entry.moved_at = self._wall()
            _has_work(entry, entry.moved_at)

    def caught_up(self, token: LeaseToken) -> None:
        """The lease has read everything there is, as its last checkpoint already said."""
        entry = self.entries.get(token)
        if entry is not None:
            entry.caught_up = True
            entry.moved_at = self._wall()
            entry.bytes_left = 0

    def dead_lettered(self, token: LeaseToken) -> None:
        """The batch the observer kept failing went to the dead-letter folder: the lease moves
        on, and its failures are over."""
        self.dead_letters.inc()
        entry = self.entries.get(token)
        if entry is not None:
            entry.failures, entry.failing_since = 0, None
            entry.moved_at = self._wall()

    def gap_stepped(self) -> None:
        """A lease stepped over a retention gap (`--on-gap skip`)."""
        self.gaps.inc()

    def observer_failed(self, token: LeaseToken) -> None:
        entry = self.entries.get(token)
        if entry is not None:
            entry.failures += 1
            if entry.failing_since is None:
                entry.failing_since = self._wall()

    def waiting(self, token: LeaseToken) -> None:
        """The lease waits for others (the segment barrier) or for the operator (paused): time
        spent so is not a lack of progress."""
        entry = self.entries.get(token)
        if entry is not None:
            entry.moved_at = self._wall()

    def stuck(self) -> dict[LeaseToken, str]:
        """The leases stuck now, with why."""
        now = self._wall()
        found = {t: e.stuck_reason(now, self.stuck_after_s) for t, e in self.entries.items()}
        return {t: why for t, why in sorted(found.items()) if why is not None}

    def read_so_far(self, token: LeaseToken) -> int | None:
        """Feed bytes read on the lease since this host took it, each block spread over its
        records (`ShardBatch.read_share`); None when it does not hold it."""
        entry = self.entries.get(token)
        return None if entry is None else entry.read_share

    def add_read(self, token: LeaseToken, read_bytes: int) -> None:
        entry = self.entries.get(token)
        if entry is not None and read_bytes > 0:
            entry.bytes_read += read_bytes
            self.bytes_read.labels(token).inc(read_bytes)

    def checkpointed(
        self, token: LeaseToken, continuation: str, *, caught_up: bool, seconds: float
    ) -> None:
        self.checkpoint_seconds.observe(seconds)
        entry = self.entries.get(token)
        if entry is not None:
            entry.continuation = continuation
            entry.checkpointed_at = entry.moved_at = self._wall()
            entry.caught_up = caught_up
            if caught_up:
                entry.bytes_left = 0

    def ended(self, token: LeaseToken, reason: CloseReason) -> None:
        self.entries.pop(token, None)
        self.closed.labels(reason.value).inc()

    def lag(self) -> tuple[int, int]:
        """Bytes and events the held leases have left to read, as far as they are known."""
        entries = self.entries.values()
        return sum(x.bytes_left or 0 for x in entries), sum(x.lag_events() or 0 for x in entries)

    def seconds_unwritten(self) -> float | None:
        """The least, over the leases with work (not caught up), of how long their work has
        waited unwritten (`LeaseProgress.seconds_unwritten`); None when none has work."""
        now = self._wall()
        waits = [e.seconds_unwritten(now) for e in self.entries.values() if not e.caught_up]
        return min(waits) if waits else None

    def to_json(self) -> list[dict[str, object]]:
        now = self._wall()
        return [self.entries[t].to_json(now, self.stuck_after_s) for t in sorted(self.entries)]


def _has_work(entry: LeaseProgress, now: datetime) -> None:
    if entry.caught_up:
        entry.busy_since = now
    entry.caught_up = False


class _LeaseGauges(Collector):
    """Per-lease gauges computed when scraped, from the leases this host holds right now."""

    def __init__(self, recorder: LeaseRecorder) -> None:
        self._recorder = recorder

    def collect(self) -> Iterator[GaugeMetricFamily]:
        p = self._recorder
        now = p.now()
        owned = GaugeMetricFamily("cfp_leases_owned", "Leases this host works on now.")
        owned.add_metric([], len(p.entries))
        lag_s, lag_b, lag_e, failures, since, stuck = (
            GaugeMetricFamily(name, text, labels=["lease"]) for name, text in PER_LEASE
        )
        for token, entry in sorted(p.entries.items()):
            lag_s.add_metric([token], entry.lag_seconds(now))
            failures.add_metric([token], entry.failures)
            since.add_metric([token], entry.seconds_since_checkpoint(now))
            is_stuck = entry.stuck_reason(now, p.stuck_after_s) is not None
            stuck.add_metric([token], 1.0 if is_stuck else 0.0)
            if entry.bytes_left is not None:
                lag_b.add_metric([token], entry.bytes_left)
            if (events := entry.lag_events()) is not None:
                lag_e.add_metric([token], events)
        yield from (owned, lag_s, lag_b, lag_e, failures, since, stuck)


PER_LEASE = (
    (
        "cfp_lag_seconds",
        "Now minus the event time of the last delivered event (0 when caught up).",
    ),
    ("cfp_lag_bytes", "Feed bytes left up to lastConsumable, from blob sizes (sampled)."),
    (
        "cfp_lag_events",
        "Events left up to lastConsumable: bytes left over the average event size so far.",
    ),
    (
        "cfp_observer_consecutive_failures",
        "The observer's failures on the batch in hand, in a row (0 after a success).",
    ),
    (
        "cfp_seconds_since_checkpoint",
        "Seconds since this host last checkpointed the lease (since it took it, before).",
    ),
    (
        "cfp_lease_stuck",
        "1 when the lease is not caught up and has not moved for --stuck-after or longer "
        "(its observer failing or not returning, or its reads).",
    ),
)
"""The per-lease gauges, in the order `_LeaseGauges` yields them: name, meaning."""
