"""The host's numbers behind `/status` and `/metrics`: one Prometheus registry per host (not the
process-wide default, so that tests may run several hosts in one process) and a recorder per
component, each the only thing that component is given to report through."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Enum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from leases.policy.timings import DEFAULT_STUCK_AFTER_S
from observers import SinkHealth
from processor.changefeed.decoding.columnar import NATIVE
from processor.host.health.freshness import EventAges, HintRecorder
from processor.host.health.lease_recorder import LeaseRecorder
from processor.host.health.lifecycle import HostState


class BalancingRecorder:
    """What the balancer reports: its listings, the leases it took, the ticks the store failed,
    and the processor-wide count of leases nobody owns."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.unowned: int | None = None  # leases no live host owns, as of the last tick
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
        self.store_errors = Counter(
            "cfp_lease_store_errors", "Balancing ticks the lease store failed.", registry=r
        )
        r.register(_Unowned(self))


class JobRecorder:
    """What the singleton jobs' runners report: each run's outcome."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.runs = Counter(
            "cfp_job_runs",
            "Runs of a singleton job on this host (the Spark state job), by outcome (ok, failed).",
            ["job", "outcome"],
            registry=registry,
        )
        self.looks = Counter(
            "cfp_job_looks",
            "Looks at a singleton job's lease by this host while it does not hold it (each may "
            "take it: free, or expired on this host's clock).",
            ["job"],
            registry=registry,
        )

    def ran(self, job: str, *, ok: bool) -> None:
        self.runs.labels(job, "ok" if ok else "failed").inc()


class HostProgress:
    """The host's registry and its recorders: `leases` for the workers, `balancing` for the
    balancer, `jobs` for the job runners, `hints` for the hints queue's reader, `state` for the
    lifecycle; `ages` is how fresh the delivered events were; the clients' own counts are read
    when scraped."""

    def __init__(
        self,
        *,
        wall: Callable[[], datetime] | None = None,
        stuck_after_s: float = DEFAULT_STUCK_AFTER_S,
        clients: ClientCounts | None = None,
        processor: str = "",
        sink: Callable[[], SinkHealth | None] = lambda: None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.ages = EventAges()
        self.registry.register(self.ages)
        self.leases = LeaseRecorder(
            self.registry,
            wall=wall or (lambda: datetime.now(UTC)),
            stuck_after_s=stuck_after_s,
            ages=self.ages,
        )
        self.hints = HintRecorder(self.registry, self.ages)
        self.balancing = BalancingRecorder(self.registry)
        self.jobs = JobRecorder(self.registry)
        self.state = Enum(
            "cfp_host_state",
            "The host's lifecycle state.",
            states=[s.value for s in HostState],
            registry=self.registry,
        )
        self.registry.register(_ClientCollector(clients or ClientCounts()))
        self.registry.register(_Writing(self.leases, processor))
        self.registry.register(_SinkGauges(sink))


class _Writing(Collector):
    """Whether the processor writes what its feed holds: the same processor-wide question on
    every host, answered by `min by (processor)` over them (`CfpProcessorNotWriting`)."""

    def __init__(self, leases: LeaseRecorder, processor: str) -> None:
        self._leases, self._processor = leases, processor

    def collect(self) -> Iterator[GaugeMetricFamily]:
        unwritten = GaugeMetricFamily(
            "cfp_seconds_since_progress",
            "The least, over this host's leases that have work (not caught up), of the seconds "
            "since the lease was last checkpointed or had work again; absent while none has "
            "work. min by (processor) over the hosts: how long the processor has written nothing.",
            labels=["processor"],
        )
        if (seconds := self._leases.seconds_unwritten()) is not None:
            unwritten.add_metric([self._processor], seconds)
        stuck_after = GaugeMetricFamily(
            "cfp_stuck_after_seconds",
            "This host's --stuck-after: a lease, or the processor, not moving this long is stuck.",
            labels=["processor"],
        )
        stuck_after.add_metric([self._processor], self._leases.stuck_after_s)
        yield unwritten
        yield stuck_after


class _SinkGauges(Collector):
    """Whether the observer's destination answers (absent for an observer that does not say)."""

    def __init__(self, sink: Callable[[], SinkHealth | None]) -> None:
        self._sink = sink

    def collect(self) -> Iterator[GaugeMetricFamily]:
        down = GaugeMetricFamily(
            "cfp_observer_unavailable",
            "1 while the observer cannot reach where it writes (the Spark observer's Spark "
            "Connect servers: none answers), 0 while it can; the host keeps its leases and is "
            "not ready meanwhile.",
        )
        since = GaugeMetricFamily(
            "cfp_observer_unavailable_since_timestamp_seconds",
            "When the observer's destination stopped answering (Unix time; absent while it "
            "answers).",
        )
        provisional = GaugeMetricFamily(
            "cfp_hints_provisional",
            "Rows of the observer's state that hold a hint the feed has not confirmed, as the "
            "holder of its state job last counted (absent on the other hosts, and without "
            "hints): max by (processor).",
        )
        overdue = GaugeMetricFamily(
            "cfp_hints_unconfirmed",
            "Of those, the hints taken longer than --hints-confirm-within ago: the feed should "
            "have confirmed them by now (max by (processor)).",
        )
        health = self._sink()
        if health is not None:
            down.add_metric([], 0.0 if health.outage is None else 1.0)
            if health.outage is not None:
                since.add_metric([], health.outage.since.timestamp())
            if health.unconfirmed is not None:
                provisional.add_metric([], health.unconfirmed.provisional)
                overdue.add_metric([], health.unconfirmed.overdue)
        yield down
        yield since
        yield provisional
        yield overdue


class _Unowned(Collector):
    """Absent until the first tick counted it (0 would claim every lease is owned)."""

    def __init__(self, recorder: BalancingRecorder) -> None:
        self._recorder = recorder

    def collect(self) -> Iterator[GaugeMetricFamily]:
        unowned = GaugeMetricFamily(
            "cfp_leases_unowned",
            "Leases no live host owns (not parked, not finished), as of this host's last "
            "balancing tick: the same processor-wide figure on every host.",
        )
        if self._recorder.unowned is not None:
            unowned.add_metric([], self._recorder.unowned)
        yield unowned


@dataclass(frozen=True, slots=True)
class ClientCounts:
    """Live views of what the host's clients count themselves, read when scraped."""

    storage_requests: Mapping[str, int] = field(default_factory=dict)  # the feed's, by kind
    lease_requests: Mapping[str, int] = field(default_factory=dict)  # the lease table's, by kind
    lease_rows_listed: Callable[[], int] = lambda: 0


class _ClientCollector(Collector):
    """The storage and lease-table clients' requests, and the native decoder's fallbacks."""

    def __init__(self, counts: ClientCounts) -> None:
        self._counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield _by_kind(
            "cfp_storage_requests",
            "HTTP requests to the change feed's storage (each attempt and listing page), by "
            "kind: list, get (manifests, chunk ranges), or another method.",
            self._counts.storage_requests,
        )
        yield _by_kind(
            "cfp_lease_requests",
            "Requests to the lease table (each attempt and listing page), by kind: list, read "
            "(one row), write (renewals, checkpoints, host rows...), table.",
            self._counts.lease_requests,
        )
        yield _count(
            "cfp_lease_rows_listed",
            "Rows the lease table returned to listings (entities read).",
            self._counts.lease_rows_listed(),
        )
        yield _count(
            "cfp_decode_fallbacks",
            "Windows of chunk bytes the native Avro decoder did not decode exactly (an error, "
            "another record count, or stuck) and fastavro decoded instead.",
            NATIVE.fallbacks,
        )
        yield _count(
            "cfp_decode_stuck",
            "Native decodes that missed --decode-deadline (the host then leaves, exit 3).",
            0 if NATIVE.stuck is None else 1,
        )


def _count(name: str, documentation: str, value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation)
    family.add_metric([], value)
    return family


def _by_kind(name: str, documentation: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=["kind"])
    for kind, n in sorted(counts.items()):
        family.add_metric([kind], n)
    return family
