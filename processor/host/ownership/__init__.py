"""The leases a host holds: each one's latest snapshot (`HeldLease`), their renewal, the
task group of their workers, the singleton jobs that run under a lease of their own, and how long
a stopping host waits for them.
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.host.ownership.drain_budget import DrainBudget
    from processor.host.ownership.held_lease import HeldLease
    from processor.host.ownership.job_runner import JobRunner
    from processor.host.ownership.read_rate import ReadRate
    from processor.host.ownership.renewer import Renewer
    from processor.host.ownership.worker_supervisor import WorkerSupervisor

__getattr__ = exports(__name__)
__all__ = ["DrainBudget", "HeldLease", "JobRunner", "ReadRate", "Renewer", "WorkerSupervisor"]
