"""Leases: one per shard, kept in an Azure Table, guarded by ETags and fenced by epochs.

Layout: `record` (the Lease record), `hosts` (what a host and the processor report of
themselves), `store` (the LeaseStore protocol and the shared write policy), `table_store` and
`memory_store` (the two implementations; the table one composes `table_calls`, `table_lease_rows`
and `table_processor_rows`), `rows` (every row of the table, both ways), `expiry`
(judging expiry on our own clock), `balancing` (the pure balancing decision, by count or, with
`load_balancing`, by read rate), `watching` (what a settled host lists at a quiet tick), `errors`,
`table_settings` (names and defaults of a lease table). Nothing here knows about the change
feed or Spark.
"""

from typing import TYPE_CHECKING

from leases.balancing import BalanceLimits, TakePlan, plan_takes
from leases.errors import LeaseCorrupt, LeaseError, LeaseStoreMisconfigured, LeaseStoreUnavailable
from leases.expiry import ExpiryTracker, LeaseView
from leases.hosts import BalanceNote, HostReport, ProcessorState, is_reserved, job_name, job_token
from leases.load_balancing import LoadRule
from leases.memory_store import MemoryLeaseStore
from leases.record import Delivered, HostId, Lease, LeaseMove, LeaseToken
from leases.store import HostRows, LeaseStore, LeaseTable, ProcessorRows
from leases.table_settings import DEFAULT_TABLE

if TYPE_CHECKING:
    from leases.table_store import TableLeaseStore


def __getattr__(name: str) -> object:
    """`TableLeaseStore` loads the Azure Tables SDK (and aiohttp) on first use: the records, the
    protocol and the pure decisions need neither."""
    if name == "TableLeaseStore":
        from leases.table_store import TableLeaseStore  # noqa: PLC0415

        return TableLeaseStore
    raise AttributeError(f"module 'leases' has no attribute {name!r}")


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
