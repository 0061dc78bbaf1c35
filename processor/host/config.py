"""Everything one host needs to run, gathered from CLI flags and `CFP_*` variables."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import datetime

from leases import HostId, LoadRule
from leases.table_settings import DEFAULT_LEASE_PARTITIONS
from observers import ObserverChoice
from processor.changefeed.change_filter import ChangeFilter
from processor.changefeed.position import DEFAULT_BATCH_EVENTS
from processor.host.dead_letter import OnObserverError
from processor.host.gaps import OnGap
from processor.host.timings import DEFAULT_STUCK_AFTER_S, Timings
from processor.reading.identity import ProcessorIdentity

DEFAULT_OBSERVER_ATTEMPTS = 5  # before `stop` or `dead-letter` gives up on a batch
DEFAULT_SCAN_PARTITIONS = 8  # leases an --initial-scan is split into
DEFAULT_HTTP_HOST = "127.0.0.1"  # /healthz, /readyz, /metrics, /status
DEFAULT_HTTP_PORT = 8080  # also in probe.py, which must start without importing this


def default_host_name() -> HostId:
    """Host name + pid: unique per process, so two processes never share an identity."""
    return HostId(f"{socket.gethostname()}-{os.getpid()}")


@dataclass(frozen=True, slots=True)
class HostConfig:
    connection_string: str
    lease_connection_string: str
    lease_table: str
    processor_name: str
    host_name: HostId
    observer: ObserverChoice
    timings: Timings
    batch_events: int = DEFAULT_BATCH_EVENTS
    start_time: datetime | None = None
    until_caught_up: bool = False
    is_ordered: bool = True
    on_observer_error: OnObserverError = OnObserverError.RETRY
    observer_attempts: int = DEFAULT_OBSERVER_ATTEMPTS
    dead_letter_dir: str | None = None  # with OnObserverError.DEAD_LETTER
    on_gap: OnGap = OnGap.SKIP
    initial_scan: bool = False  # a processor without leases starts with a scan of the account
    scan_partitions: int = DEFAULT_SCAN_PARTITIONS
    change: ChangeFilter = field(default_factory=ChangeFilter)  # --container, --event-type...
    end_time: datetime | None = None  # --end-time: the leases finish there
    stuck_after_s: float = DEFAULT_STUCK_AFTER_S
    by_load: LoadRule | None = None  # --balance-by load (None: by count)
    lease_partitions: int = DEFAULT_LEASE_PARTITIONS  # for a processor created now

    @property
    def identity(self) -> ProcessorIdentity:
        """What this host delivers: every host of the processor must agree."""
        return ProcessorIdentity(self.change, self.end_time)
