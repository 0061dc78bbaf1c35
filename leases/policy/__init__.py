"""The lease protocol's pure decisions, tested as properties: when a lease has expired, judged
on this host's own clock (`expiry_tracker`), every interval of the protocol (`timings`), which
leases to take or ask for, by count (`balancing`) or by read rate (`load_balancing`), and what
a settled host lists at a quiet tick (`watching`). No I/O: the host's balancing loop feeds them
what it listed.
"""

from leases.policy.balancing import BalanceLimits, TakePlan, plan_takes
from leases.policy.expiry_tracker import ExpiryTracker, LeaseView
from leases.policy.load_balancing import LoadRule, plan_load_steals
from leases.policy.timings import Timings, derive_timings
from leases.policy.watching import TableView, watch_ranges

__all__ = [
    "BalanceLimits",
    "ExpiryTracker",
    "LeaseView",
    "LoadRule",
    "TableView",
    "TakePlan",
    "Timings",
    "derive_timings",
    "plan_load_steals",
    "plan_takes",
    "watch_ranges",
]
