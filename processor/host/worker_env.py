"""What every worker of a host is given, in three parts: the services it uses, the policy the
host's settings set, and the signals it waits on; and the one way a worker's run ends
(`WorkerEnded`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from leases import HostId, LeaseTable
from observers import CloseReason, ObserverFactory
from processor.changefeed.catalog import FeedCatalog
from processor.clock import Clock
from processor.host.config import DeliveryPolicy, Reading
from processor.host.dead_letter import DeadLetterFolder
from processor.host.lease_recorder import LeaseRecorder
from processor.host.timings import Timings
from processor.reading.barrier_book import PositionBook
from processor.waiting import running_event


@dataclass(frozen=True, slots=True)
class WorkerDeps:
    """The services every worker of the host shares."""

    store: LeaseTable
    catalog: FeedCatalog
    book: PositionBook  # every lease's position, for the segment barrier
    observer_factory: ObserverFactory
    clock: Clock
    progress: LeaseRecorder  # for /status and /metrics
    dead_letters: DeadLetterFolder | None = None  # with OnObserverError.DEAD_LETTER


@dataclass(frozen=True, slots=True)
class WorkerPolicy:
    """Who the worker works as, and the host's settings it follows (shared, never copied)."""

    host: HostId
    processor: str
    timings: Timings
    reading: Reading
    delivery: DeliveryPolicy


@dataclass(frozen=True, slots=True)
class WorkerSignals:
    """What a worker waits on or sets, shared with the host and its balancer."""

    stop: asyncio.Event  # the host is draining
    running: asyncio.Event = field(default_factory=running_event)  # cleared: processor paused
    caught_up: asyncio.Event | None = None  # set when a lease records it is caught up
    # the host's feed watcher: a lease caught up at a segment's end waits for it, not polling
    feed_changed: Callable[[], asyncio.Event] | None = None


@dataclass(frozen=True, slots=True)
class WorkerEnv:
    deps: WorkerDeps
    policy: WorkerPolicy
    signals: WorkerSignals


class WorkerEnded(Exception):
    """How a worker ends. `park`: the cause will not go away by retrying (bad data, a poison
    batch with `stop`), so the lease is parked instead of released."""

    def __init__(self, reason: CloseReason, error: str = "", *, park: bool = False) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.error = error
        self.park = park
