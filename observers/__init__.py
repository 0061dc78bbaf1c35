"""Observers: the contract between a host and the code that consumes a lease's batches.

Public names: `Observer`, `PartitionContext`, `CloseReason`, `ChangeEvent`, `EventBatch` (what
`process_changes` receives), `ArrowObserver` and `ArrowBatch` (what `process_arrow` receives:
the batch as Arrow columns; from `protocol`), `LeaseLostError`, `SingletonJob` and `JobRun`
(work one host at a time does), and the plugin loader (`ObserverChoice`, what `--observer`
chose; `load_observer_factory`), and what an observer may declare beyond the contract
(`checkpoints_after_each_batch`, `needs_segment_order`, `singleton_jobs`,
`first_run_after_s`, `KnowsWhatItHolds`). Built-ins: `log`, `jsonl`, `spark`. Plugins import only
from here. Nothing here knows about Azure Tables.
"""

from observers.errors import ObserverError, PluginLoadError, ReplayRequired
from observers.plugins import ObserverCalls, ObserverChoice, load_observer_factory
from observers.protocol import (
    ArrowBatch,
    ArrowObserver,
    ChangeEvent,
    CloseReason,
    EventBatch,
    JobRun,
    KnowsWhatItHolds,
    LeaseLostError,
    Observer,
    ObserverFactory,
    PartitionContext,
    SingletonJob,
    checkpoints_after_each_batch,
    first_run_after_s,
    needs_segment_order,
    singleton_jobs,
    takes_arrow,
)

__all__ = [
    "ArrowBatch",
    "ArrowObserver",
    "ChangeEvent",
    "CloseReason",
    "EventBatch",
    "JobRun",
    "KnowsWhatItHolds",
    "LeaseLostError",
    "Observer",
    "ObserverCalls",
    "ObserverChoice",
    "ObserverError",
    "ObserverFactory",
    "PartitionContext",
    "PluginLoadError",
    "ReplayRequired",
    "SingletonJob",
    "checkpoints_after_each_batch",
    "first_run_after_s",
    "load_observer_factory",
    "needs_segment_order",
    "singleton_jobs",
    "takes_arrow",
]
