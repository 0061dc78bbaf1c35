"""A lease's life on this host, every write that decides who owns it: acquired (`taking`),
renewed (`renewer`, with its read rate in `read_rate`), stolen (`stealing`: ask, hand over,
take), released (`release`). Once held, every write goes through the one snapshot each held
lease keeps (`held_lease`). The balancer, the workers and the job runners use these; nothing
else on a host writes a lease's owner. When they look at the table again is one pure rule,
`leases.policy.timings:Timings.next_look`.
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.host.leasing.held_lease import HeldLease
    from processor.host.leasing.read_rate import ReadRate
    from processor.host.leasing.release import let_go
    from processor.host.leasing.renewer import Renewer
    from processor.host.leasing.stealing import HandOverRequests
    from processor.host.leasing.taking import LeaseTaker, take_job_lease

__getattr__ = exports(__name__)
__all__ = [
    "HandOverRequests",
    "HeldLease",
    "LeaseTaker",
    "ReadRate",
    "Renewer",
    "let_go",
    "take_job_lease",
]
