"""The lease store on Azure Table Storage (or Azurite), with the aio client of azure-data-tables.

One table (default `cfpleases`) may hold several processors. A processor's own rows (identity,
processor row, host rows, job leases) have PartitionKey = processor name; its leases are spread
over `LeasePartitions` partitions (a number fixed in the identity row when the processor is
created), PartitionKey `NAME~i` with i = CRC-32 of the token mod that number, so that renewals and
listings of many leases do not all fall on one partition. A processor made before partitions (no
`LeasePartitions`) keeps its leases in `NAME`. RowKey = lease token. With `rows` (every row both
ways), the only module of `leases/` that imports the Azure SDK; it turns SDK failures into
`leases.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp
from azure.core import MatchConditions
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableClient
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_random_exponential,
)

from leases.errors import LeaseError, LeaseStoreMisconfigured, LeaseStoreUnavailable
from leases.hosts import (
    HOST_ROW_PREFIX,
    HOST_ROWS_FROM,
    IDENTITY_ROW,
    PROCESSOR_ROW,
    BalanceNote,
    HostReport,
    ProcessorState,
    is_reserved,
    key_range,
)
from leases.record import Lease, LeaseToken
from leases.rows import (
    host_from_row,
    host_row,
    lease_from_row,
    lease_row,
    note_row,
    state_from_row,
    state_row,
)
from leases.store import ConditionalLeaseStore, retrying
from leases.table_settings import (
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_TABLE,
    MAX_LEASE_PARTITIONS,
    check_names,
    client_options,
)

T = TypeVar("T")

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
OPEN_WITHIN_S = 60.0


def _translate(e: Exception, what: str, endpoint: str = "the lease store") -> LeaseError:
    if isinstance(e, ClientAuthenticationError) and e.status_code is None:
        # no request was sent: Entra ID gave no token (no network, no identity on this machine)
        return LeaseStoreUnavailable(
            f"{what}: no Microsoft Entra ID token for {endpoint}: {e.message}"
        )
    if isinstance(e, HttpResponseError) and e.status_code is None:
        # no HTTP answer at all: a transport failure the SDK wrapped
        return LeaseStoreUnavailable(
            f"{what}: no answer from {endpoint}: {type(e).__name__}: {e.message}"
        )
    if isinstance(e, ClientAuthenticationError):
        return LeaseStoreMisconfigured(f"{what}: the lease store refused our credentials")
    if isinstance(e, HttpResponseError):
        status = e.status_code or 0
        if status in TRANSIENT_STATUS:
            return LeaseStoreUnavailable(f"{what}: lease store answered {status}")
        return LeaseStoreMisconfigured(f"{what}: lease store answered {status} ({e.reason})")
    return LeaseStoreUnavailable(f"{what}: {type(e).__name__}: {e}")


_TRANSPORT = (ServiceRequestError, ServiceResponseError, aiohttp.ClientError, OSError, TimeoutError)


class TableLeaseStore(ConditionalLeaseStore):
    """Leases of one processor in one table.

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
        self._client = client
        self.table = client.table_name
        self.processor = processor
        self._timeout_s = request_timeout_s
        # requests sent (each attempt, each page of a listing), by kind, and rows listed: what
        # the lease table costs (`cfp_lease_requests_total`, `cfp_lease_rows_listed_total`)
        self.requests: Counter[str] = Counter()
        self.rows_listed = 0
        self._partitions: int | None = None  # from the identity row, once read

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

    async def __aenter__(self) -> TableLeaseStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._client.close()

    async def open(self, *, within_s: float = OPEN_WITHIN_S) -> TableLeaseStore:
        """Create the table if it does not exist yet (any host may; the first one wins).

        Transient failures are retried for up to `within_s`: a host starting while the network
        or the store hiccups waits instead of exiting."""

        async def create() -> None:
            with contextlib.suppress(ResourceExistsError):
                await self._client.create_table()

        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(LeaseStoreUnavailable),
            stop=stop_after_delay(within_s),
            wait=wait_random_exponential(multiplier=0.2, max=5.0),
            reraise=True,
        ):
            with attempt:
                await self._call(f"table {self.table}", create, kind="table")
        return self

    async def _call(self, what: str, op: Callable[[], Awaitable[T]], *, kind: str = "") -> T:
        """Run one store operation; `kind` counts it as one request (a listing counts its
        pages itself)."""
        if kind:
            self.requests[kind] += 1
        try:
            async with asyncio.timeout(self._timeout_s):
                return await op()
        except (asyncio.CancelledError, LeaseError):
            raise
        except (HttpResponseError, *_TRANSPORT) as e:
            raise _translate(e, what, self._client.url) from e

    def _lease(self, entity: Any) -> Lease:
        return lease_from_row(self.table, dict(entity), str(entity.metadata["etag"]))

    async def lease_partitions(self) -> int:
        """How many partitions the processor's leases are spread over: its identity row's
        `LeasePartitions`, 1 for a processor made before them (or not made yet)."""
        if self._partitions is None:
            await self.identity()
        return self._partitions or 1

    def _pk(self, token: str, partitions: int) -> str:
        if partitions == 1 or is_reserved(token):
            return self.processor
        return lease_partition(self.processor, token, partitions)

    async def _list(self, lo: str, hi: str) -> list[Lease]:
        partitions = 1 if lo >= HOST_ROWS_FROM else await self.lease_partitions()
        keys = [self._pk(lo, 1)] if partitions == 1 else partition_keys(self.processor, partitions)

        async def op() -> list[Lease]:
            got: list[Lease] = []
            for pk in keys:
                rows = self._client.query_entities(
                    "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                    parameters={"pk": pk, "lo": lo, "hi": hi},
                )
                async for page in rows.by_page():
                    self.requests["list"] += 1
                    got += [self._lease(e) async for e in page]
            self.rows_listed += len(got)
            return got

        return await self._call(f"listing leases of {self.processor}", op)

    # --- host rows (see leases.hosts) ---------------------------------------------------------

    async def publish_host(self, report: HostReport) -> None:
        """Write this host's row (unconditionally: only its host writes it)."""

        async def op() -> None:
            await self._client.upsert_entity(
                host_row(self.processor, report), mode=UpdateMode.REPLACE
            )

        await self._call(f"host row {report.name}", op, kind="write")

    async def list_hosts(self) -> list[HostReport]:
        async def op() -> list[HostReport]:
            lo, hi = key_range(HOST_ROW_PREFIX)
            rows = self._client.query_entities(
                "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                parameters={"pk": self.processor, "lo": lo, "hi": hi},
            )
            reports: list[HostReport] = []
            async for page in rows.by_page():
                self.requests["list"] += 1
                async for e in page:
                    self.rows_listed += 1
                    with contextlib.suppress(KeyError, TypeError, ValueError):
                        reports.append(host_from_row(dict(e)))
            return reports

        return await self._call(f"listing hosts of {self.processor}", op)

    async def processor_state(self) -> ProcessorState:
        """The processor row (not paused when there is none)."""

        async def op() -> ProcessorState:
            try:
                entity = await self._client.get_entity(self.processor, PROCESSOR_ROW)
            except ResourceNotFoundError:
                return ProcessorState()
            return state_from_row(dict(entity))

        return await self._call(f"processor row of {self.processor}", op, kind="read")

    async def set_processor_state(self, state: ProcessorState) -> None:
        async def op() -> None:
            await self._client.upsert_entity(
                state_row(self.processor, state), mode=UpdateMode.REPLACE
            )

        await self._call(f"processor row of {self.processor}", op, kind="write")

    async def note_balance(self, note: BalanceNote) -> None:
        async def op() -> None:
            await self._client.upsert_entity(note_row(self.processor, note), mode=UpdateMode.MERGE)

        await self._call(f"processor row of {self.processor}", op, kind="write")

    async def identity(self) -> str | None:
        async def op() -> str | None:
            try:
                entity = await self._client.get_entity(self.processor, IDENTITY_ROW)
            except ResourceNotFoundError:
                return None
            self._partitions = _partitions_of(entity)
            return str(entity.get("Identity") or "")

        return await self._call(f"identity row of {self.processor}", op, kind="read")

    async def claim_identity(self, text: str, *, lease_partitions: int = 1) -> str:
        async def op() -> bool:
            row = {
                "PartitionKey": self.processor,
                "RowKey": IDENTITY_ROW,
                "Identity": text,
                "LeasePartitions": lease_partitions,
            }
            try:
                await self._client.create_entity(row)
            except ResourceExistsError:
                return False
            self._partitions = lease_partitions
            return True

        async for attempt in retrying():
            with attempt:
                # a lost reply may hide our own insert: the stored row says what holds
                if await self._call(f"identity row of {self.processor}", op, kind="write"):
                    return text
                stored = await self.identity()
                if stored is None:
                    raise LeaseStoreUnavailable(f"identity row of {self.processor} vanished")
                return stored
        raise AssertionError("unreachable")  # pragma: no cover

    async def delete_host(self, name: str) -> None:
        async def op() -> None:
            with contextlib.suppress(ResourceNotFoundError):
                await self._client.delete_entity(self.processor, HOST_ROW_PREFIX + name)

        await self._call(f"host row {name}", op, kind="write")

    async def _read(self, token: LeaseToken) -> Lease | None:
        pk = self._pk(token, await self.lease_partitions())

        async def op() -> Lease | None:
            try:
                entity = await self._client.get_entity(pk, token)
            except ResourceNotFoundError:
                return None
            return self._lease(entity)

        return await self._call(f"lease {token}", op, kind="read")

    async def _insert(self, lease: Lease) -> Lease | None:
        pk = self._pk(lease.token, await self.lease_partitions())

        async def op() -> Lease | None:
            try:
                reply = await self._client.create_entity(lease_row(pk, lease))
            except ResourceExistsError:
                return None
            return _with_etag(lease, reply)

        return await self._call(f"creating lease {lease.token}", op, kind="write")

    async def _replace(self, lease: Lease, etag: str) -> Lease | None:
        pk = self._pk(lease.token, await self.lease_partitions())

        async def op() -> Lease | None:
            try:
                reply = await self._client.update_entity(
                    lease_row(pk, lease),
                    mode=UpdateMode.REPLACE,
                    etag=etag,
                    match_condition=MatchConditions.IfNotModified,
                )
            except (ResourceModifiedError, ResourceNotFoundError):
                return None
            except HttpResponseError as e:
                if e.status_code in (409, 412, 404):
                    return None
                raise
            return _with_etag(lease, reply)

        return await self._call(f"writing lease {lease.token}", op, kind="write")


def lease_partition(processor: str, token: str, partitions: int) -> str:
    """The PartitionKey of lease `token` of a processor whose leases are spread over
    `partitions` partitions (more than one)."""
    return f"{processor}~{zlib.crc32(token.encode()) % partitions}"


def partition_keys(processor: str, partitions: int) -> list[str]:
    return [f"{processor}~{i}" for i in range(partitions)]


def _partitions_of(entity: Mapping[str, Any]) -> int:
    """An identity row's `LeasePartitions`: 1 when absent (a processor made before it)."""
    value = entity.get("LeasePartitions")
    return value if isinstance(value, int) and 1 <= value <= MAX_LEASE_PARTITIONS else 1


def _with_etag(lease: Lease, reply: Mapping[str, Any]) -> Lease:
    return dataclasses.replace(lease, etag=str(reply["etag"]))
