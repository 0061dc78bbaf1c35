"""Observers: the contract between a host and the code that consumes a lease's batches.

Plugins import only from here. What a host hands over: `PartitionContext` (the lease, its epoch,
its checkpoint), `ArrowBatch` (the batch as Arrow columns, for `ArrowObserver.process_arrow`)
or `EventBatch` of `ChangeEvent`s (for `Observer.process_changes`), each with its `Origin`
(the lease, segment, processor and read time its events share), and `CloseReason`. The
columns of `ArrowBatch.changes()` are `CHANGES_SCHEMA`; `Op` and `ReadMethod` are the values of
its `op` and `read_method` columns, and `BadEventError` what a record that cannot be made into
them raises. `LeaseLostError`, `ReplayRequired` and `Unavailable` are what an observer may raise;
`SingletonJob` and `JobRun` are work one host at a time does. What an observer may declare
beyond `process_arrow` or `process_changes` is a protocol each: on the observer, what concerns
its lease (`Opens`, `Closes`, `ChecksItsOwnPoints`, `KnowsWhatItHolds`) and whether it takes
hints, provisional batches of Blob Storage events ahead of the feed (`TakesHints`); on the
factory, what holds for the whole host (`OrdersItself`, `OffersJobs`, `TakesOptions`,
`KeepsDeadLetters`, `ReportsHealth`: an `Outage` of what it writes to and the
`UnconfirmedHints` it holds, in a `SinkHealth`; `EnteredOncePerHost`); on a job,
`WaitsBeforeItsFirstRun`. The functions beside them
(`checkpoints_after_each_batch`, `needs_segment_order`, `singleton_jobs`, `first_run_after_s`,
`dead_letter_dir`, `sink_health`, `takes_arrow`, `takes_changes`, `takes_hints`) are how the
host asks. A plugin's options are an `Options` dataclass; `PluginHost` is what a factory that
takes options is told of its host, and `StorageAccess` how it reaches a storage account
(`options`).
`Format` names the JSON shapes of an event. The built-in observers (`log`, `jsonl`, `spark`)
live in `observers.builtin`; the host finds and calls observers through `processor.plugins`.
Nothing here knows about Azure Tables.
"""

from typing import TYPE_CHECKING

from observers.envelope import Op, ReadMethod
from observers.errors import BadEventError, PluginLoadError, ReplayRequired, Unavailable
from observers.formats import Format
from observers.options import PluginHost, StorageAccess
from observers.origin import Origin
from observers.protocol import (
    ArrowBatch,
    ArrowObserver,
    ChangeEvent,
    ChecksItsOwnPoints,
    CloseReason,
    Closes,
    EnteredOncePerHost,
    EventBatch,
    JobRun,
    KeepsDeadLetters,
    KnowsWhatItHolds,
    LeaseLostError,
    Observer,
    ObserverFactory,
    OffersJobs,
    Opens,
    OrdersItself,
    Outage,
    PartitionContext,
    ReportsHealth,
    SingletonJob,
    SinkHealth,
    TakesHints,
    TakesOptions,
    UnconfirmedHints,
    WaitsBeforeItsFirstRun,
    checkpoints_after_each_batch,
    dead_letter_dir,
    first_run_after_s,
    needs_segment_order,
    singleton_jobs,
    sink_health,
    takes_arrow,
    takes_changes,
    takes_hints,
)

if TYPE_CHECKING:
    from observers.changes import CHANGES_SCHEMA


def __getattr__(name: str) -> object:
    """`CHANGES_SCHEMA` loads pyarrow on first use: `cfp --help` and the contract's types do not
    need it."""
    if name == "CHANGES_SCHEMA":
        from observers.changes import CHANGES_SCHEMA  # noqa: PLC0415

        return CHANGES_SCHEMA
    raise AttributeError(f"module 'observers' has no attribute {name!r}")


__all__ = [
    "CHANGES_SCHEMA",
    "ArrowBatch",
    "ArrowObserver",
    "BadEventError",
    "ChangeEvent",
    "ChecksItsOwnPoints",
    "CloseReason",
    "Closes",
    "EnteredOncePerHost",
    "EventBatch",
    "Format",
    "JobRun",
    "KeepsDeadLetters",
    "KnowsWhatItHolds",
    "LeaseLostError",
    "Observer",
    "ObserverFactory",
    "OffersJobs",
    "Op",
    "Opens",
    "OrdersItself",
    "Origin",
    "Outage",
    "PartitionContext",
    "PluginHost",
    "PluginLoadError",
    "ReadMethod",
    "ReplayRequired",
    "ReportsHealth",
    "SingletonJob",
    "SinkHealth",
    "StorageAccess",
    "TakesHints",
    "TakesOptions",
    "Unavailable",
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
