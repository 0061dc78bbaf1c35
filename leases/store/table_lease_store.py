"""The lease store on Azure Table Storage (or Azurite), with the aio client of azure-data-tables.

One table (default `cfpleases`) may hold several processors. A processor's own rows (identity,
processor row, host rows, job leases) have PartitionKey = processor name; its leases are spread over
partitions of their own (`leases.store.table_lease_rows`). RowKey = lease token. The store is one
role class per protocol of `leases.store.lease_store` over one `TableCalls` (the client, its
deadlines, its counters): `TableLeaseRows` under the shared write policy, `TableHostRows`,
`TableProcessorRows`. With `rows` (every row both ways), these `table_*` modules are the only ones
of `leases/` that import the Azure SDK; `TableCalls` turns SDK failures into `leases.errors`.
"""

from __future__ import annotations

from collections import Counter

from azure.data.tables.aio import TableClient

from leases.record import Lease, LeaseToken
from leases.reserved_rows import BalanceNote, HostReport, ProcessorState
from leases.store.lease_store import ConditionalLeaseStore
from leases.store.table_calls import TableCalls
from leases.store.table_lease_rows import TableLeaseRows
from leases.store.table_processor_rows import TableHostRows, TableProcessorRows
from leases.store.table_settings import (
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_TABLE,
    check_names,
    client_options,
)

OPEN_WITHIN_S = 60.0


class TableLeaseStore(ConditionalLeaseStore):
    """Leases of one processor in one table: every role of `LeaseStore`, each handed to the
    small class that implements it over the one client they share.

    Resource handling: `open()` creates the table when missing; `close()` (or `async with`)
    closes the HTTP session. Errors: see `LeaseStore`.
    """

    def __init__(
        self,
        client: TableClient,
        *,
        processor: str,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    ) -> None:
        check_names(client.table_name, processor)
        self.table = client.table_name
        self.processor = processor
        self._calls = TableCalls(client, timeout_s=request_timeout_s)
        self._processor_rows = TableProcessorRows(self._calls, processor)
        self._host_rows = TableHostRows(self._calls, processor)
        self._lease_rows = TableLeaseRows(
            self._calls, processor, lease_partitions=self._processor_rows.lease_partitions
        )

    @classmethod
    def from_connection_string(
        cls,
        conn_str: str,
        *,
        table: str = DEFAULT_TABLE,
        processor: str,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    ) -> TableLeaseStore:
        check_names(table, processor)
        client = TableClient.from_connection_string(
            conn_str, table_name=table, **client_options(request_timeout_s)
        )
        return cls(client, processor=processor, request_timeout_s=request_timeout_s)

    @property
    def requests(self) -> Counter[str]:
        """Requests sent (each attempt, each page of a listing), by kind: what the lease table
        costs (`cfp_lease_requests_total`)."""
        return self._calls.requests

    @property
    def rows_listed(self) -> int:
        """Rows the table returned to listings (`cfp_lease_rows_listed_total`)."""
        return self._calls.rows_listed

    async def __aenter__(self) -> TableLeaseStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._calls.close()

    async def open(self, *, within_s: float = OPEN_WITHIN_S) -> TableLeaseStore:
        """Create the table if it does not exist yet (any host may; the first one wins).

        Transient failures are retried for up to `within_s`: a host starting while the network
        or the store hiccups waits instead of exiting."""
        await self._calls.create_table(within_s=within_s)
        return self

    # --- the leases: the write policy's four primitives (`ConditionalLeaseStore`) ---------------

    async def _list(self, lo: str, hi: str) -> list[Lease]:
        return await self._lease_rows.list_rows(lo, hi)

    async def _read(self, token: LeaseToken) -> Lease | None:
        return await self._lease_rows.read(token)

    async def _insert(self, lease: Lease) -> Lease | None:
        return await self._lease_rows.insert(lease)

    async def _replace(self, lease: Lease, etag: str) -> Lease | None:
        return await self._lease_rows.replace(lease, etag)

    # --- host rows (`HostRows`, see leases.reserved_rows) ---------------------------------------

    async def publish_host(self, report: HostReport) -> None:
        await self._host_rows.publish_host(report)

    async def list_hosts(self) -> list[HostReport]:
        return await self._host_rows.list_hosts()

    async def delete_host(self, name: str) -> None:
        await self._host_rows.delete_host(name)

    # --- the processor's rows (`ProcessorRows`) -------------------------------------------------

    async def processor_state(self) -> ProcessorState:
        return await self._processor_rows.processor_state()

    async def set_processor_state(self, state: ProcessorState) -> None:
        await self._processor_rows.set_processor_state(state)

    async def note_balance(self, note: BalanceNote) -> None:
        await self._processor_rows.note_balance(note)

    async def identity(self) -> str | None:
        return await self._processor_rows.identity()

    async def claim_identity(self, text: str, *, lease_partitions: int = 1) -> str:
        return await self._processor_rows.claim_identity(text, lease_partitions=lease_partitions)

    async def lease_partitions(self) -> int:
        return await self._processor_rows.lease_partitions()
