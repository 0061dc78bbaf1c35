"""What every worker of a host shares, and the one way a worker's run ends (`WorkerEnded`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from leases import HostId, LeaseTable
from observers import CloseReason, ObserverFactory
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.change_filter import ChangeFilter
from processor.changefeed.position import DEFAULT_BATCH_EVENTS
from processor.clock import Clock
from processor.host.config import DEFAULT_OBSERVER_ATTEMPTS
from processor.host.dead_letter import DeadLetterFolder, OnObserverError
from processor.host.gaps import OnGap
from processor.host.progress import HostProgress
from processor.host.timings import Timings
from processor.reading.barrier_book import PositionBook
from processor.waiting import running_event


@dataclass(frozen=True, slots=True)
class WorkerEnv:
    store: LeaseTable
    catalog: FeedCatalog
    book: PositionBook
    observer_factory: ObserverFactory
    host: HostId
    processor: str
    timings: Timings
    clock: Clock
    stop: asyncio.Event  # the host is draining
    batch_events: int = DEFAULT_BATCH_EVENTS
    is_ordered: bool = True
    observer_attempts: int = DEFAULT_OBSERVER_ATTEMPTS
    observer_spec: str = ""
    caught_up: asyncio.Event | None = None  # set when a lease records it is caught up
    on_observer_error: OnObserverError = OnObserverError.RETRY
    dead_letters: DeadLetterFolder | None = None  # with OnObserverError.DEAD_LETTER
    on_gap: OnGap = OnGap.SKIP  # data at a lease's position deleted (retention)
    progress: HostProgress = field(default_factory=HostProgress)  # for /status and /metrics
    running: asyncio.Event = field(default_factory=running_event)  # cleared: processor paused
    change: ChangeFilter = field(
        default_factory=ChangeFilter
    )  # what the processor delivers (its identity)
    # the host's feed watcher: a lease caught up at a segment's end waits for it, not polling
    feed_changed: Callable[[], asyncio.Event] | None = None


class WorkerEnded(Exception):
    """How a worker ends. `park`: the cause will not go away by retrying (bad data, a poison
    batch with `stop`), so the lease is parked instead of released."""

    def __init__(self, reason: CloseReason, error: str = "", *, park: bool = False) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.error = error
        self.park = park
