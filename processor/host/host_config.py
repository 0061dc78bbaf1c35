"""Everything one host needs to run, made once from CLI flags and `CFP_*` variables: one frozen
settings object per concern, handed as is to the part that uses it (never copied field by
field)."""

from __future__ import annotations

import enum
import os
import secrets
import socket
from dataclasses import dataclass, field
from datetime import datetime

from leases import HostId, LoadRule
from leases.policy.timings import DEFAULT_STUCK_AFTER_S, Timings
from leases.store.table_settings import DEFAULT_LEASE_PARTITIONS
from processor.changefeed.change_filter import ChangeFilter
from processor.changefeed.shard_batch import DEFAULT_BATCH_EVENTS
from processor.hints.settings import HintQueue
from processor.plugins.observer_calls import DEFAULT_OBSERVER_THREADS
from processor.plugins.observer_loading import ObserverChoice
from processor.reading.processor_identity import ProcessorIdentity
from processor.reading.retention_gaps import OnGap

DEFAULT_OBSERVER_ATTEMPTS = 5  # before `stop` or `dead-letter` gives up on a batch
DEFAULT_SCAN_PARTITIONS = 8  # leases an --initial-scan is split into
DEFAULT_HTTP_HOST = "127.0.0.1"  # /healthz, /readyz, /metrics, /status
DEFAULT_HTTP_PORT = 8080  # also in probe.py, which must start without importing this


def default_host_name() -> HostId:
    """Host name, pid and a random suffix: containers on the host network share the host's
    name and may all be pid 1, and two hosts must never share an identity."""
    return HostId(f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}")


DEFAULT_DRAIN_S = 90.0  # below deploy/'s 120 s grace period, with room to release and exit


class OnObserverError(enum.Enum):
    """`--on-observer-error`: what a worker does with a batch its observer keeps failing on."""

    RETRY = "retry"
    DEAD_LETTER = "dead-letter"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class Placement:
    """Which account's feed, which processor in which lease table, and who this host is."""

    connection_string: str
    lease_connection_string: str
    lease_table: str
    processor_name: str
    host_name: HostId
    lease_partitions: int = DEFAULT_LEASE_PARTITIONS  # for a processor created now


@dataclass(frozen=True, slots=True)
class Reading:
    """What a worker reads from its lease and how: the filter and the end time are the
    processor's identity (every host must agree on them)."""

    change: ChangeFilter = field(default_factory=ChangeFilter)  # --container, --event-type...
    end_time: datetime | None = None  # --end-time: the leases finish there
    batch_events: int = DEFAULT_BATCH_EVENTS
    is_ordered: bool = True  # the segment barrier (off: --unordered)
    on_gap: OnGap = OnGap.SKIP  # data at a lease's position deleted (retention)

    @property
    def identity(self) -> ProcessorIdentity:
        return ProcessorIdentity(self.change, self.end_time)


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """Who receives the batches, and what a batch it keeps failing on does to its lease."""

    observer: ObserverChoice
    on_observer_error: OnObserverError = OnObserverError.RETRY
    attempts: int = DEFAULT_OBSERVER_ATTEMPTS
    threads: int = DEFAULT_OBSERVER_THREADS  # for observers' plain methods, all leases together
    dead_letter_dir: str | None = None  # with OnObserverError.DEAD_LETTER
    stuck_after_s: float = DEFAULT_STUCK_AFTER_S
    drain_s: float = DEFAULT_DRAIN_S  # how long a stopping host waits for its observers


@dataclass(frozen=True, slots=True)
class NewLeases:
    """Where leases created by this host start; they are created once per processor."""

    start_time: datetime | None = None
    initial_scan: bool = False  # a processor without leases starts with a scan of the account
    scan_partitions: int = DEFAULT_SCAN_PARTITIONS


@dataclass(frozen=True, slots=True)
class HostConfig:
    placement: Placement
    delivery: DeliveryPolicy
    timings: Timings
    reading: Reading = field(default_factory=Reading)
    new_leases: NewLeases = field(default_factory=NewLeases)
    by_load: LoadRule | None = None  # --balance-by load (None: by count)
    until_caught_up: bool = False
    hints: HintQueue | None = None  # --hints-queue
