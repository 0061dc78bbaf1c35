"""The balancing loop: each tick lists the lease table (`table_listing`), creates leases for
new shards (`lease_creator`), plans with the pure decisions of `leases.policy`, takes or asks for
leases (through `processor.host.leasing`), and reports the host's health as it goes (`tick_watch`).
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.host.balancing.balancer import Balancer, TickReport, host_balancer
    from processor.host.balancing.lease_creator import LeaseCreator
    from processor.host.balancing.table_listing import TableListing
    from processor.host.balancing.tick_watch import TickWatch

__getattr__ = exports(__name__)
__all__ = [
    "Balancer",
    "LeaseCreator",
    "TableListing",
    "TickReport",
    "TickWatch",
    "host_balancer",
]
