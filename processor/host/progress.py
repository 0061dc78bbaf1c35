"""What each lease of this host has done so far: the numbers behind `/status` and `/metrics`.

Workers report here (started, delivered, checkpointed, ended) and nothing else reads their
internals. Counters go to Prometheus as they happen; per-lease gauges (lag, position) are read
at scrape time from the live entries, so a lease that left the host leaves no stale series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Enum, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from leases import LeaseToken
from observers import CloseReason
from processor.changefeed.columnar import NATIVE
from processor.host.lifecycle import HostState
from processor.host.timings import DEFAULT_STUCK_AFTER_S
from processor.reading.lag import events_left, time_lag_s

CHECKPOINT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


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

    def seconds_since_checkpoint(self, now: datetime) -> float:
        """Since the last checkpoint this host wrote (since it took the lease, before any)."""
        return max(0.0, (now - (self.checkpointed_at or self.started_at)).total_seconds())

    def stuck_reason(self, now: datetime, after_s: float) -> str | None:
        """Why the lease counts as stuck: its observer has failed for `after_s` or longer, or it
        is not caught up and has not moved for that long (a wait at the segment barrier or
        while paused is no fault of its own, and not counted). None when it is not stuck."""
        if self.failing_since is not None:
            failing = (now - self.failing_since).total_seconds()
            if failing >= after_s:
                return f"the observer has failed {self.failures} times in a row for {failing:.0f} s"
            return None
        if self.caught_up:
            return None
        still = (now - (self.moved_at or self.started_at)).total_seconds()
        if still >= after_s:
            return f"no progress for {still:.0f} s while not caught up"
        return None

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


class HostProgress:
    """Every lease this host works on now, plus the host's Prometheus counters.

    One registry per host (not the process-wide default) so that tests may run several hosts in
    one process."""

    def __init__(
        self,
        *,
        wall: Callable[[], datetime] | None = None,
        stuck_after_s: float = DEFAULT_STUCK_AFTER_S,
        storage_requests: Mapping[str, int] | None = None,  # the feed's requests, by kind
        lease_requests: Mapping[str, int] | None = None,  # the lease table's, by kind
        lease_rows_listed: Callable[[], int] = lambda: 0,
    ) -> None:
        self._wall = wall or (lambda: datetime.now(UTC))
        self.stuck_after_s = stuck_after_s
        self.leases: dict[LeaseToken, LeaseProgress] = {}
        self.total_events = 0  # over every lease this host ever held (leases come and go)
        self.unowned: int | None = None  # leases no live host owns, as of the last tick
        # live views of the clients' counts (empty at first: `or` would cut them off)
        self.storage_requests: Mapping[str, int] = (
            {} if storage_requests is None else storage_requests
        )
        self.lease_requests: Mapping[str, int] = {} if lease_requests is None else lease_requests
        self.lease_rows_listed = lease_rows_listed
        self.registry = CollectorRegistry()
        r = self.registry
        self.events = Counter(
            "cfp_events", "Events accepted by the observer.", ["lease"], registry=r
        )
        self.batches = Counter(
            "cfp_batches", "Batches accepted by the observer.", ["lease"], registry=r
        )
        self.bytes_read = Counter(
            "cfp_read_bytes", "Change feed bytes read (Avro blocks).", ["lease"], registry=r
        )
        self.acquired = Counter("cfp_leases_acquired", "Leases this host acquired.", registry=r)
        self.listings = Counter(
            "cfp_lease_listings",
            "Listings of the lease table by this host's balancer: full (every lease) or watch "
            "(a settled host's watched slices).",
            ["kind"],
            registry=r,
        )
        self.stolen = Counter(
            "cfp_leases_stolen",
            "Leases this host took from another owner (expired, or not handed over in time).",
            registry=r,
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
        self.store_errors = Counter(
            "cfp_lease_store_errors", "Balancing ticks the lease store failed.", registry=r
        )
        self.job_runs = Counter(
            "cfp_job_runs",
            "Runs of a singleton job on this host (the Spark state job), by outcome (ok, failed).",
            ["job", "outcome"],
            registry=r,
        )
        self.state = Enum(
            "cfp_host_state",
            "The host's lifecycle state.",
            states=[s.value for s in HostState],
            registry=r,
        )
        for reason in CloseReason:
            self.closed.labels(reason.value)
        r.register(_LeaseGauges(self))

    # --- what workers and the balancer report -------------------------------------------------

    def started(self, token: LeaseToken, epoch: int, continuation: str | None) -> LeaseProgress:
        entry = LeaseProgress(token, epoch, self._wall(), continuation)
        self.leases[token] = entry
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
        entry = self.leases.get(token)
        if entry is None:
            return
        entry.events += events
        entry.read_share += read_share
        entry.batches += 1
        entry.failures, entry.failing_since = 0, None
        entry.moved_at = self._wall()
        self.total_events += events
        entry.caught_up = False
        if last_event_time is not None:
            entry.last_event_time = last_event_time
        self.events.labels(token).inc(events)
        self.batches.labels(token).inc()
        self.add_read(token, read_bytes)

    def delivering(self, token: LeaseToken) -> None:
        """A batch goes to the observer: the lease has work (an observer that never returns
        makes it stuck), counted from now."""
        entry = self.leases.get(token)
        if entry is not None:
            entry.caught_up = False
            entry.moved_at = self._wall()

    def caught_up(self, token: LeaseToken) -> None:
        """The lease has read everything there is, as its last checkpoint already said."""
        entry = self.leases.get(token)
        if entry is not None:
            entry.caught_up = True
            entry.moved_at = self._wall()
            entry.bytes_left = 0

    def dead_lettered(self, token: LeaseToken) -> None:
        """The batch the observer kept failing went to the dead-letter folder: the lease moves
        on, and its failures are over."""
        self.dead_letters.inc()
        entry = self.leases.get(token)
        if entry is not None:
            entry.failures, entry.failing_since = 0, None
            entry.moved_at = self._wall()

    def observer_failed(self, token: LeaseToken) -> None:
        entry = self.leases.get(token)
        if entry is not None:
            entry.failures += 1
            if entry.failing_since is None:
                entry.failing_since = self._wall()

    def waiting(self, token: LeaseToken) -> None:
        """The lease waits for others (the segment barrier) or for the operator (paused): time
        spent so is not a lack of progress."""
        entry = self.leases.get(token)
        if entry is not None:
            entry.moved_at = self._wall()

    def stuck(self) -> dict[LeaseToken, str]:
        """The leases stuck now, with why."""
        now = self._wall()
        found = {t: e.stuck_reason(now, self.stuck_after_s) for t, e in self.leases.items()}
        return {t: why for t, why in sorted(found.items()) if why is not None}

    def read_so_far(self, token: LeaseToken) -> int | None:
        """Feed bytes read on the lease since this host took it, each block spread over its
        records (`ShardBatch.read_share`); None when it does not hold it."""
        entry = self.leases.get(token)
        return None if entry is None else entry.read_share

    def add_read(self, token: LeaseToken, read_bytes: int) -> None:
        entry = self.leases.get(token)
        if entry is not None and read_bytes > 0:
            entry.bytes_read += read_bytes
            self.bytes_read.labels(token).inc(read_bytes)

    def checkpointed(
        self, token: LeaseToken, continuation: str, *, caught_up: bool, seconds: float
    ) -> None:
        self.checkpoint_seconds.observe(seconds)
        entry = self.leases.get(token)
        if entry is not None:
            entry.continuation = continuation
            entry.checkpointed_at = entry.moved_at = self._wall()
            entry.caught_up = caught_up
            if caught_up:
                entry.bytes_left = 0

    def ended(self, token: LeaseToken, reason: CloseReason) -> None:
        self.leases.pop(token, None)
        self.closed.labels(reason.value).inc()

    def to_json(self) -> list[dict[str, object]]:
        now = self._wall()
        return [self.leases[t].to_json(now, self.stuck_after_s) for t in sorted(self.leases)]

    def now(self) -> datetime:
        return self._wall()


class _LeaseGauges(Collector):
    """Per-lease gauges computed when scraped, from the leases this host holds right now."""

    def __init__(self, progress: HostProgress) -> None:
        self._progress = progress

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        p = self._progress
        now = p.now()
        owned = GaugeMetricFamily("cfp_leases_owned", "Leases this host works on now.")
        owned.add_metric([], len(p.leases))
        lag_s = GaugeMetricFamily(
            "cfp_lag_seconds",
            "Now minus the event time of the last delivered event (0 when caught up).",
            labels=["lease"],
        )
        lag_b = GaugeMetricFamily(
            "cfp_lag_bytes",
            "Feed bytes left up to lastConsumable, from blob sizes (sampled).",
            labels=["lease"],
        )
        lag_e = GaugeMetricFamily(
            "cfp_lag_events",
            "Events left up to lastConsumable: bytes left over the average event size so far.",
            labels=["lease"],
        )
        failures = GaugeMetricFamily(
            "cfp_observer_consecutive_failures",
            "The observer's failures on the batch in hand, in a row (0 after a success).",
            labels=["lease"],
        )
        since = GaugeMetricFamily(
            "cfp_seconds_since_checkpoint",
            "Seconds since this host last checkpointed the lease (since it took it, before).",
            labels=["lease"],
        )
        stuck = GaugeMetricFamily(
            "cfp_lease_stuck",
            "1 when the observer has failed for --stuck-after or longer, or the lease is not "
            "caught up and has not moved for that long.",
            labels=["lease"],
        )
        unowned = GaugeMetricFamily(
            "cfp_leases_unowned",
            "Leases no live host owns (not parked, not finished), as of this host's last "
            "balancing tick: the same processor-wide figure on every host.",
        )
        if p.unowned is not None:
            unowned.add_metric([], p.unowned)
        requests = _by_kind(
            "cfp_storage_requests",
            "HTTP requests to the change feed's storage (each attempt and listing page), by "
            "kind: list, get (manifests, chunk ranges), or another method.",
            p.storage_requests,
        )
        table_requests = _by_kind(
            "cfp_lease_requests",
            "Requests to the lease table (each attempt and listing page), by kind: list, read "
            "(one row), write (renewals, checkpoints, host rows...), table.",
            p.lease_requests,
        )
        rows_listed = CounterMetricFamily(
            "cfp_lease_rows_listed", "Rows the lease table returned to listings (entities read)."
        )
        rows_listed.add_metric([], p.lease_rows_listed())
        fallbacks = CounterMetricFamily(
            "cfp_decode_fallbacks",
            "Windows of chunk bytes the native Avro decoder did not decode exactly (an error, "
            "another record count, or stuck) and fastavro decoded instead.",
        )
        fallbacks.add_metric([], NATIVE.fallbacks)
        decode_stuck = CounterMetricFamily(
            "cfp_decode_stuck",
            "Native decodes that missed --decode-deadline (the host then leaves, exit 3).",
        )
        decode_stuck.add_metric([], 0 if NATIVE.stuck is None else 1)
        for token, entry in sorted(p.leases.items()):
            lag_s.add_metric([token], entry.lag_seconds(now))
            failures.add_metric([token], entry.failures)
            since.add_metric([token], entry.seconds_since_checkpoint(now))
            is_stuck = entry.stuck_reason(now, p.stuck_after_s) is not None
            stuck.add_metric([token], 1.0 if is_stuck else 0.0)
            if entry.bytes_left is not None:
                lag_b.add_metric([token], entry.bytes_left)
            if (events := entry.lag_events()) is not None:
                lag_e.add_metric([token], events)
        yield owned
        yield lag_s
        yield lag_b
        yield lag_e
        yield failures
        yield since
        yield stuck
        yield unowned
        yield requests
        yield table_requests
        yield rows_listed
        yield fallbacks
        yield decode_stuck


def _by_kind(name: str, documentation: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=["kind"])
    for kind, n in sorted(counts.items()):
        family.add_metric([kind], n)
    return family
