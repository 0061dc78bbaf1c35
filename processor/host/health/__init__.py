"""What a host reports of itself: its lifecycle (`/readyz`, `cfp status`), its numbers
(`/status`, `/metrics`), each lease's progress and lag, its row in the lease table, and the HTTP
endpoints that serve them.
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.host.health.endpoints import HostHealth, serve
    from processor.host.health.host_progress import HostProgress
    from processor.host.health.lag_sampling import sample_lag
    from processor.host.health.lease_progress import LeaseProgress
    from processor.host.health.lease_recorder import LeaseRecorder
    from processor.host.health.lifecycle import HostState, Lifecycle
    from processor.host.health.presence import Presence

__getattr__ = exports(__name__)
__all__ = [
    "HostHealth",
    "HostProgress",
    "HostState",
    "LeaseProgress",
    "LeaseRecorder",
    "Lifecycle",
    "Presence",
    "sample_lag",
    "serve",
]
