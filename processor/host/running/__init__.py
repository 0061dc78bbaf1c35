"""What runs under the leases a host holds: the task group of their workers
(`worker_supervisor`), the singleton jobs that run under a lease of their own (`job_runner`), and
how long a stopping host waits for them (`drain_budget`).
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.host.running.drain_budget import DrainBudget
    from processor.host.running.job_runner import JobRunner
    from processor.host.running.worker_supervisor import WorkerSupervisor

__getattr__ = exports(__name__)
__all__ = ["DrainBudget", "JobRunner", "WorkerSupervisor"]
