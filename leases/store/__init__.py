"""Where leases are kept: the `LeaseStore` protocol and the write policy both stores share
(`lease_store`), the store on Azure Table Storage (`table_lease_store`, composed of
`table_calls`, `table_lease_rows` and `table_processor_rows`, with every row both ways in
`table_rows` and the table's names and defaults in `table_settings`), and the in-process one
(`memory_lease_store`) with the same ETag semantics.
"""

from typing import TYPE_CHECKING

from leases.store.lease_store import HostRows, LeaseStore, LeaseTable, ProcessorRows
from leases.store.memory_lease_store import MemoryLeaseStore
from leases.store.table_settings import DEFAULT_TABLE

if TYPE_CHECKING:
    from leases.store.table_lease_store import TableLeaseStore


def __getattr__(name: str) -> object:
    """`TableLeaseStore` loads the Azure Tables SDK (and aiohttp) on first use: the records, the
    protocol and the pure decisions need neither."""
    if name == "TableLeaseStore":
        from leases.store.table_lease_store import TableLeaseStore  # noqa: PLC0415

        return TableLeaseStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_TABLE",
    "HostRows",
    "LeaseStore",
    "LeaseTable",
    "MemoryLeaseStore",
    "ProcessorRows",
    "TableLeaseStore",
]
