"""One worker per owned lease: its reader's batches handed to its observer (`delivery`), the
checkpoints written after them (`checkpoint_ledger`, `checkpointer`), a retention gap stepped
over (`gap_step`), a failing batch set aside (`dead_letter_folder`), and the one look at the feed
per poll that wakes caught-up workers (`feed_watcher`).
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.host.worker.checkpoint_ledger import CheckpointLedger
    from processor.host.worker.checkpointer import Checkpointer
    from processor.host.worker.dead_letter_folder import DeadLetterFolder
    from processor.host.worker.delivery import Delivery
    from processor.host.worker.feed_watcher import FeedWatcher
    from processor.host.worker.worker import Worker, run_worker
    from processor.host.worker.worker_env import WorkerEnv

__getattr__ = exports(__name__)
__all__ = [
    "CheckpointLedger",
    "Checkpointer",
    "DeadLetterFolder",
    "Delivery",
    "FeedWatcher",
    "Worker",
    "WorkerEnv",
    "run_worker",
]
