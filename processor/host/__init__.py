"""One host process: the renewer, the balancer and the workers of the leases it owns.

`host_config` is what a host is told (made once from `cfp run`'s options), `assembly` makes every
part once from it, and `host` runs them. The parts, bottom first: `health` (what the host reports),
`leasing` (a lease's life: acquired, renewed, stolen, released), `running` (the workers' task
group, singleton jobs, the drain), `worker` (one lease's batches from its reader to its observer
and checkpoints), `balancing` (which leases to take, and when).
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.host.assembly import AssembledHost, assemble
    from processor.host.host import Host
    from processor.host.host_config import (
        DeliveryPolicy,
        HostConfig,
        NewLeases,
        OnObserverError,
        Placement,
        Reading,
        default_host_name,
    )

__getattr__ = exports(__name__)
__all__ = [
    "AssembledHost",
    "DeliveryPolicy",
    "Host",
    "HostConfig",
    "NewLeases",
    "OnObserverError",
    "Placement",
    "Reading",
    "assemble",
    "default_host_name",
]
