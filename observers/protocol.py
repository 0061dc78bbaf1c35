"""The observer contract: what a host hands to user code for each lease it owns.

One observer instance per lease. The host calls `open(ctx)` once, then for each batch in order
`process_arrow(ctx, batch)` when the observer has it (the batch as Arrow columns, an
`ArrowBatch`), else `process_changes(ctx, events)` (the batch as `ChangeEvent`s), then
`close(ctx, reason)` exactly once; never a batch after close. Each method may be `async def` or
a plain function (a plain one runs in a thread of the host's observer pool, and checkpoints with
`ctx.checkpoint_blocking`). `open` and `close` are optional (`Opens`, `Closes`). A factory that
is also an async context manager is entered once per host, before its first lease, and left
after its last (`EnteredOncePerHost`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from observers.events import ArrowBatch, ChangeEvent, EventBatch

__all__ = [
    "ArrowBatch",
    "ArrowObserver",
    "ChangeEvent",
    "ChecksItsOwnPoints",
    "CloseReason",
    "Closes",
    "EnteredOncePerHost",
    "EventBatch",
    "JobRun",
    "KeepsDeadLetters",
    "KnowsWhatItHolds",
    "LeaseLostError",
    "Observer",
    "ObserverFactory",
    "OffersJobs",
    "Opens",
    "OrdersItself",
    "Outage",
    "PartitionContext",
    "ReportsHealth",
    "SingletonJob",
    "SinkHealth",
    "TakesHints",
    "TakesOptions",
    "UnconfirmedHints",
    "WaitsBeforeItsFirstRun",
    "checkpoints_after_each_batch",
    "dead_letter_dir",
    "first_run_after_s",
    "needs_segment_order",
    "singleton_jobs",
    "sink_health",
    "takes_arrow",
    "takes_changes",
    "takes_hints",
]


def _observer_log() -> Any:
    """The observers' logger; structlog loads with the first context, not with the contract."""
    import structlog  # noqa: PLC0415 - `cfp --help` imports the contract, never logs

    return structlog.get_logger("cfp.observer")


class CloseReason(Enum):
    """Why a lease's observer was closed."""

    SHUTDOWN = "shutdown"
    """The host is stopping: the last batch was checkpointed and the lease released."""
    HANDED_OVER = "handed_over"
    """Another host asked for the lease: the last batch was checkpointed and the lease released."""
    LEASE_LOST = "lease_lost"
    """Another host owns the lease now (or renewal failed for too long); nothing more was
    checkpointed, and batches since the last checkpoint will be delivered again elsewhere."""
    OBSERVER_ERROR = "observer_error"
    """The observer failed, in one of four ways; nothing after the last checkpoint was
    checkpointed, and it will come again:

    - its `open` raised: the lease is released with the error, to be taken again;
    - `process_arrow` or `process_changes` kept failing for `--observer-attempts` under
      `--on-observer-error stop`: the lease is parked in front of the batch until an operator
      acts;
    - it raised `ReplayRequired` (it lost batches it had accepted): the lease is released, so
      they come again from the checkpoint;
    - under `--on-observer-error dead-letter`, the dead-letter folder could not be written.
    """
    FEED_ERROR = "feed_error"
    """The worker could not go on, in one of two ways:

    - bytes that will not change: a corrupt chunk or block, a chunk that retention removed
      under `--on-gap stop`, or a continuation that does not parse. The lease is parked with
      the error until an operator acts.
    - a bug in the worker itself (an unexpected exception, logged as `worker.crashed` with its
      traceback): the lease is released with the error and taken again.
    """
    FINISHED = "finished"
    """The lease has delivered all it ever will (a partition of the initial scan): checkpointed
    and released, and no host takes it again."""


@dataclass(slots=True)
class PartitionContext:
    """Identity of one lease as seen by its observer, and a way to checkpoint it.

    The host checkpoints after every batch the observer's `process_arrow` or `process_changes`
    returns from. An observer that sets `auto_checkpoint = False` checkpoints itself:
    `checkpoint()` records the position after the last batch handed to it; an observer that
    buffers takes `mark()` while it processes a batch (the position after that batch) and later,
    once the batch is durable, calls `checkpoint(mark)`. A checkpoint never moves back: an older
    mark is ignored. `checkpoint` is a coroutine for async observers; a plain (threaded) method
    calls `checkpoint_blocking(mark)` instead. Both raise `LeaseLostError` when the lease is no
    longer ours.
    """

    lease_token: str
    host_name: str
    epoch: int
    processor_name: str = ""
    log: Any = field(default_factory=_observer_log)
    # the host's side, set by `observers.host_side` and never by a plugin: where
    # `checkpoint(mark)` goes (none: checkpoints are ignored), the host's event loop (where a
    # plain method's `checkpoint_blocking` sends its checkpoint), and the batch's mark
    _on_checkpoint: Callable[[object | None], Awaitable[None]] | None = field(
        default=None, init=False, repr=False
    )
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False, repr=False)
    _mark: object | None = field(default=None, init=False, repr=False)

    def mark(self) -> object:
        """An opaque token for the position after the batch being processed."""
        if self._mark is None:
            raise RuntimeError("mark() is only meaningful inside process_changes")
        return self._mark

    async def checkpoint(self, mark: object | None = None) -> None:
        if self._on_checkpoint is not None:
            await self._on_checkpoint(mark)

    def checkpoint_blocking(
        self, mark: object | None = None, timeout_s: float | None = None
    ) -> None:
        """`checkpoint(mark)` from a plain method, which runs in a thread of the host's: waits
        there (at most `timeout_s`) until the checkpoint is written. Errors: `LeaseLostError`;
        `TimeoutError`; `RuntimeError` when called on the event loop itself (an async method
        awaits `checkpoint` instead: waiting here would stop the loop that writes it)."""
        if self._on_checkpoint is None:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass  # no loop in this thread: a plain method's, as it should be
        else:
            raise RuntimeError("checkpoint_blocking is for plain methods; await checkpoint()")
        if self._loop is None:
            raise RuntimeError("this context has no host loop to checkpoint through")
        asyncio.run_coroutine_threadsafe(self.checkpoint(mark), self._loop).result(timeout_s)


class LeaseLostError(Exception):
    """The lease moved to another host; the observer will be closed with LEASE_LOST."""

    def __init__(self, lease_token: str, epoch: int) -> None:
        super().__init__(f"lease {lease_token} at epoch {epoch} is no longer held by this host")
        self.lease_token = lease_token
        self.epoch = epoch


@runtime_checkable
class Observer(Protocol):
    """Receives the batches of one lease. `open` and `close` may be left out; any method may be
    async or plain (a plain one runs in a thread of the host's observer pool). Raising from
    `process_changes` means "not accepted": the batch is tried again with backoff, and what a
    batch that keeps failing does is the host's `--on-observer-error` (retry for ever, park the
    lease in front of it, or write it to a dead-letter folder and go on). `ReplayRequired`
    instead closes the lease with OBSERVER_ERROR, to be read again from its checkpoint."""

    def process_changes(
        self, ctx: PartitionContext, events: Sequence[ChangeEvent]
    ) -> Awaitable[None] | None: ...


@runtime_checkable
class ArrowObserver(Protocol):
    """An observer that takes each batch as Arrow columns: the host calls `process_arrow`
    instead of `process_changes`, and no `ChangeEvent` is made unless the observer asks the
    batch for one (`EventBatch(batch)`). The same rules hold: raising means "not accepted"."""

    def process_arrow(self, ctx: PartitionContext, batch: ArrowBatch) -> Awaitable[None] | None: ...


ObserverFactory = Callable[[], Observer | ArrowObserver]


@dataclass(frozen=True, slots=True)
class JobRun:
    """What one run of a `SingletonJob` did."""

    continuation: str  # kept in the job's lease and given to the next run, on any host
    is_caught_up: bool  # nothing was left to do when the run ended
    summary: Mapping[str, object] = field(default_factory=dict)  # logged


@runtime_checkable
class SingletonJob(Protocol):
    """Work that one host of a processor does at a time, besides its leases: the host holding
    the job's own lease runs it every `every_s` seconds (e.g. the Spark observer's state job).
    An observer factory offers its jobs as `jobs`. A run must be safe to repeat, and to be run by
    a host that lost the job's lease without knowing (a paused host waking up): the lease only
    keeps the hosts from doing the same work at once."""

    name: str
    every_s: float

    async def run(self, continuation: str | None, *, final: bool = False) -> JobRun:
        """One run, from the continuation the last run left (None the first time). `final`:
        the host is leaving after this run because the processor caught up."""
        ...


# What an observer or its factory may declare beyond the contract above, each a protocol the
# host checks with `isinstance`, never by poking at attributes. One rule says where each goes:
# what concerns one lease (how its batches are taken, opened, closed, checkpointed) is the
# observer's; what holds for every lease of the host (order, jobs, options, folders, health,
# a context entered once) is the factory's; a job says its own timing.


@runtime_checkable
class Opens(Protocol):
    """An observer with work to do before its lease's first batch: `open(ctx)`, once. An open
    that raises closes the lease with OBSERVER_ERROR before any batch."""

    def open(self, ctx: PartitionContext) -> Awaitable[None] | None: ...


@runtime_checkable
class Closes(Protocol):
    """An observer with work to do when its lease ends: `close(ctx, reason)`, exactly once,
    and never a batch after it (even when `open` failed)."""

    def close(self, ctx: PartitionContext, reason: CloseReason) -> Awaitable[None] | None: ...


@runtime_checkable
class ChecksItsOwnPoints(Protocol):
    """An observer that says whether the host checkpoints after each batch it accepts
    (`auto_checkpoint = True`, the default) or it does so itself through `ctx.checkpoint(mark)`
    once its batches are durable (`False`; the Spark observer)."""

    auto_checkpoint: bool


@runtime_checkable
class KnowsWhatItHolds(Protocol):
    """An observer that keeps the lease's events somewhere it can read back (a table keyed by
    position): once per lease, after `open` and before the first batch, the host calls
    `held_through(ctx, first)` with the position of the first event it is about to deliver,
    and leaves out every event at or below the position returned (None: deliver them all).
    After a crash the checkpoint lags what the sink wrote; this keeps the next owner from
    delivering that stretch again (the Spark observer returns its change log's floor)."""

    def held_through(
        self, ctx: PartitionContext, first: str
    ) -> Awaitable[str | None] | str | None: ...


@runtime_checkable
class TakesHints(Protocol):
    """An observer that takes hints (`cfp run --hints-queue`): Blob Storage events from Event
    Grid, seconds after their changes and minutes before the feed records them.

    The host makes one observer of this kind for its hints, besides its leases' (its context's
    lease is "hints", and checkpoints through it are ignored), opens it, and calls
    `process_hints(ctx, batch)` with batches whose `provisional` is true: the change log's
    columns, `read_method` "hint", `position` "". A hint comes at least once, in no order, late
    or never, and may not be what the feed later records; the feed still delivers every event
    it holds, whatever the hints did. Returning means the hints are safe (their queue messages
    are deleted); raising means not accepted: they come back from the queue."""

    def process_hints(self, ctx: PartitionContext, batch: ArrowBatch) -> Awaitable[None] | None: ...


@runtime_checkable
class OrdersItself(Protocol):
    """A factory whose observers put events in order themselves (by sequencer): the host may
    then drop the segment barrier (`needs_segment_order = False`; the Spark observer)."""

    needs_segment_order: bool


@runtime_checkable
class OffersJobs(Protocol):
    """A factory with work one host of the processor does at a time (the Spark state job)."""

    jobs: Sequence[SingletonJob]


@runtime_checkable
class WaitsBeforeItsFirstRun(Protocol):
    """A job whose holder lets `first_run_after_s` pass after taking its lease before the first
    run (the Spark state job: not beside a starting host's first writes)."""

    first_run_after_s: float


@runtime_checkable
class KeepsDeadLetters(Protocol):
    """A factory that names the folder `--on-observer-error dead-letter` writes to when
    `--dead-letter-dir` is not given (the Spark observer: beside its local output; None: it
    has none)."""

    dead_letter_dir: str | None


@runtime_checkable
class TakesOptions(Protocol):
    """A factory (a class or a function) that takes `--observer-option KEY=VALUE`s: `Options`
    is the dataclass they fill, handed to the factory as `options=`."""

    Options: type


@runtime_checkable
class EnteredOncePerHost(Protocol):
    """A factory that is also an async context manager: entered once per host, before its
    first lease's observer is made, and left after its last is closed (one Spark session for
    every lease of the host)."""

    async def __aenter__(self) -> object: ...

    async def __aexit__(self, *exc_info: object) -> bool | None: ...


@dataclass(frozen=True, slots=True)
class Outage:
    """Where an observer writes cannot be reached: what, since when (the host's wall clock),
    and why. While it lasts the host is not ready, and says so in `/status`, its row for
    `cfp status` and its metrics."""

    what: str  # what is unreachable ("spark")
    since: datetime
    reason: str

    def describe(self) -> str:
        return f"{self.what} unavailable since {self.since:%Y-%m-%dT%H:%M:%SZ}: {self.reason}"


@dataclass(frozen=True, slots=True)
class UnconfirmedHints:
    """What hints left in a sink that keeps them apart (the Spark state table): rows still
    provisional, and those of them older than the sink's deadline for the feed to confirm them
    (`--hints-confirm-within`), as last counted."""

    provisional: int
    overdue: int


@dataclass(frozen=True, slots=True)
class SinkHealth:
    """How the destination of a factory's observers is doing: an outage, if any, figures that
    `/status` shows as they are (JSON values), and the hints it holds unconfirmed (None: it
    does not say; exported as `cfp_hints_unconfirmed`)."""

    outage: Outage | None = None
    details: Mapping[str, object] = field(default_factory=dict)
    unconfirmed: UnconfirmedHints | None = None


@runtime_checkable
class ReportsHealth(Protocol):
    """A factory whose observers write through something that can be lost and come back (the
    Spark observer's Connect servers): the host asks `health()` whenever it reports."""

    def health(self) -> SinkHealth: ...


def sink_health(factory: object) -> SinkHealth | None:
    """The health `factory` reports, or None when it reports none."""
    return factory.health() if isinstance(factory, ReportsHealth) else None


def first_run_after_s(job: object) -> float:
    """How long the holder of `job` waits after taking its lease before its first run (0)."""
    return job.first_run_after_s if isinstance(job, WaitsBeforeItsFirstRun) else 0.0


def takes_arrow(observer: object) -> bool:
    """Whether the host hands `observer` its batches as Arrow columns (`process_arrow`)."""
    return isinstance(observer, ArrowObserver) and callable(observer.process_arrow)


def takes_hints(observer: object) -> bool:
    """Whether `observer` takes hints (`process_hints`)."""
    return isinstance(observer, TakesHints) and callable(observer.process_hints)


def takes_changes(observer: object) -> bool:
    """Whether `observer` can take its batches as `ChangeEvent`s (`process_changes`)."""
    return isinstance(observer, Observer) and callable(observer.process_changes)


def dead_letter_dir(factory: object) -> str | None:
    """The dead-letter folder `factory` names, or None."""
    return factory.dead_letter_dir if isinstance(factory, KeepsDeadLetters) else None


def checkpoints_after_each_batch(observer: object) -> bool:
    """Whether the host checkpoints after each batch `observer` accepts."""
    return observer.auto_checkpoint if isinstance(observer, ChecksItsOwnPoints) else True


def needs_segment_order(factory: object) -> bool:
    """Whether the observers of `factory` need the segment barrier's per-blob order."""
    return factory.needs_segment_order if isinstance(factory, OrdersItself) else True


def singleton_jobs(factory: object) -> Sequence[SingletonJob]:
    return factory.jobs if isinstance(factory, OffersJobs) else ()
