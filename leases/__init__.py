"""Leases: one per shard, kept in an Azure Table, guarded by ETags and fenced by epochs.

`record` is the lease itself, `hosts` what a host and the processor report of themselves beside
the leases, `errors` the store's errors; `store` is where leases are kept (the protocol, the
Azure Table store, the in-memory one) and `policy` the pure decisions of the protocol (expiry,
timings, balancing). Nothing here knows about the change feed or Spark.
"""

from typing import TYPE_CHECKING

from leases import store
from leases.errors import LeaseCorrupt, LeaseError, LeaseStoreMisconfigured, LeaseStoreUnavailable
from leases.policy import BalanceLimits, ExpiryTracker, LeaseView, LoadRule, TakePlan, plan_takes
from leases.record import Delivered, HostId, Lease, LeaseMove, LeaseToken
from leases.reserved_rows import (
    BalanceNote,
    HostReport,
    ProcessorState,
    is_reserved,
    job_name,
    job_token,
)
from leases.store import (
    DEFAULT_TABLE,
    HostRows,
    LeaseStore,
    LeaseTable,
    MemoryLeaseStore,
    ProcessorRows,
)

if TYPE_CHECKING:
    from leases.store import TableLeaseStore

__getattr__ = store.__getattr__  # `TableLeaseStore`, loaded on first use

__all__ = [
    "DEFAULT_TABLE",
    "BalanceLimits",
    "BalanceNote",
    "Delivered",
    "ExpiryTracker",
    "HostId",
    "HostReport",
    "HostRows",
    "Lease",
    "LeaseCorrupt",
    "LeaseError",
    "LeaseMove",
    "LeaseStore",
    "LeaseStoreMisconfigured",
    "LeaseStoreUnavailable",
    "LeaseTable",
    "LeaseToken",
    "LeaseView",
    "LoadRule",
    "MemoryLeaseStore",
    "ProcessorRows",
    "ProcessorState",
    "TableLeaseStore",
    "TakePlan",
    "is_reserved",
    "job_name",
    "job_token",
    "plan_takes",
]
