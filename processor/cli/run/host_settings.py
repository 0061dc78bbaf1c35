"""The pure step from `cfp run`'s options to a `HostConfig`: each concern's settings made once.

`host_config` checks what the options cannot check one by one (flags that exclude each other,
timings that do not fit) and raises `ConfigError` with a message naming the flags; it touches
no storage and reads no environment. An observer's own options (the Spark observer's among them)
are checked when the host loads it (`processor/plugins`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from leases import HostId, LoadRule
from leases.policy.timings import Timings, derive_timings
from observers.formats import Format
from processor import connection
from processor.changefeed.change_filter import ChangeFilter
from processor.hints.settings import (
    DEFAULT_MAX_DELIVERIES,
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_VISIBILITY_TIMEOUT_S,
    QUEUE_NAME,
    HintQueue,
)
from processor.host.host_config import (
    DeliveryPolicy,
    HostConfig,
    NewLeases,
    OnObserverError,
    Placement,
    Reading,
)
from processor.plugins.observer_loading import ObserverChoice
from processor.reading.retention_gaps import OnGap


class ConfigError(ValueError):
    """Options that do not make a host, with what to change."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Every option of `cfp run`, as click parsed it (run_options.py declares them)."""

    connection_string: str | None
    lease_connection_string: str | None
    lease_table: str
    processor_name: str
    host_name: str | None
    observer: str
    output_format: str
    on_observer_error: str
    on_gap: str
    observer_options: tuple[str, ...]
    observer_attempts: int
    observer_threads: int
    dead_letter_dir: str | None
    stuck_after: float
    drain_timeout: float
    lease_expiration: float
    renew_interval: float | None
    acquire_interval: float | None
    lease_partitions: int
    balance_by: str
    load_tolerance: float
    poll_interval: float
    max_batch_events: int
    decode_deadline: float
    containers: tuple[str, ...]
    blob_prefix: str
    event_types: tuple[str, ...]
    blob_types: tuple[str, ...]
    start_time: datetime | None
    end_time: datetime | None
    start_from_now: bool
    initial_scan: bool
    scan_partitions: int
    until_caught_up: bool
    unordered: bool
    http_on: bool
    http_host: str
    http_port: int
    hints_queue: str | None = None
    hints_connection_string: str | None = None
    hints_visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT_S
    hints_poll_interval: float = DEFAULT_POLL_INTERVAL_S
    hints_max_deliveries: int = DEFAULT_MAX_DELIVERIES


def host_config(o: RunOptions, *, conn: str, now: datetime, default_host: HostId) -> HostConfig:
    """The host `o` describes, reading the feed through `conn` (resolved already).
    Errors: `ConfigError`."""
    start = _start_time(o, now)
    try:
        timings = _timings(o)
    except ValueError as e:  # also a malformed connection string
        raise ConfigError(str(e)) from e
    return HostConfig(
        placement=Placement(
            connection_string=conn,
            lease_connection_string=connection.resolve_other(o.lease_connection_string, conn),
            lease_table=o.lease_table,
            processor_name=o.processor_name,
            host_name=HostId(o.host_name) if o.host_name else default_host,
            lease_partitions=o.lease_partitions,
        ),
        delivery=_delivery(o),
        timings=timings,
        reading=Reading(
            change=ChangeFilter.of(
                containers=o.containers,
                blob_prefix=o.blob_prefix,
                event_types=o.event_types,
                blob_types=o.blob_types,
            ),
            end_time=o.end_time,
            batch_events=o.max_batch_events,
            is_ordered=not o.unordered,
            on_gap=OnGap(o.on_gap),
        ),
        new_leases=NewLeases(start, o.initial_scan, o.scan_partitions),
        by_load=LoadRule(o.load_tolerance) if o.balance_by == "load" else None,
        until_caught_up=o.until_caught_up,
        hints=_hints(o, conn),
    )


def _hints(o: RunOptions, conn: str) -> HintQueue | None:
    """`--hints-queue` and its settings (None: no hints). Errors: `ConfigError` for a name
    that is no queue's."""
    if not o.hints_queue:
        return None
    if not QUEUE_NAME.match(o.hints_queue):
        raise ConfigError(
            f"--hints-queue {o.hints_queue!r} is not a queue name: 3-63 lowercase letters, "
            "digits and single hyphens, beginning and ending with a letter or digit"
        )
    return HintQueue(
        name=o.hints_queue,
        connection_string=connection.resolve_other(o.hints_connection_string, conn),
        visibility_timeout_s=o.hints_visibility_timeout,
        poll_interval_s=o.hints_poll_interval,
        max_deliveries=o.hints_max_deliveries,
    )


def _start_time(o: RunOptions, now: datetime) -> datetime | None:
    """Where new leases start: --start-time, --start-from-now (`now`), or the feed's start."""
    if o.start_time is not None and o.start_from_now:
        raise ConfigError("--start-time and --start-from-now exclude each other")
    start = now if o.start_from_now else o.start_time
    if o.end_time is not None and start is not None and o.end_time <= start:
        raise ConfigError(
            f"--end-time {o.end_time.isoformat()} is not after the start {start.isoformat()}"
        )
    if o.initial_scan and start is not None:
        raise ConfigError(
            "--initial-scan sets where the feed starts: drop --start-time/--start-from-now"
        )
    return start


def _timings(o: RunOptions) -> Timings:
    return derive_timings(
        o.lease_expiration,
        renew_every_s=o.renew_interval,
        acquire_every_s=o.acquire_interval,
        poll_s=o.poll_interval,
    )


def _delivery(o: RunOptions) -> DeliveryPolicy:
    """The observer, its options, and its failure policy."""
    return DeliveryPolicy(
        observer=ObserverChoice(o.observer, o.observer_options, fmt=Format(o.output_format)),
        on_observer_error=OnObserverError(o.on_observer_error),
        attempts=o.observer_attempts,
        threads=o.observer_threads,
        dead_letter_dir=o.dead_letter_dir,  # none: the observer's own, if it names one
        stuck_after_s=o.stuck_after,
        drain_s=o.drain_timeout,
    )
