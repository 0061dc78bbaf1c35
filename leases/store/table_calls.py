"""The requests of one lease store to its table: each under a deadline, counted, and its SDK
failures turned into `leases.errors`. Every role of `TableLeaseStore` (its leases, host rows and
processor rows) sends its requests through one `TableCalls`, so that each says only what it asks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aiohttp
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.data.tables import TableEntity
from azure.data.tables.aio import TableClient
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_random_exponential,
)

from leases.errors import LeaseError, LeaseStoreMisconfigured, LeaseStoreUnavailable

T = TypeVar("T")

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
SIDE_BY_SIDE = 8  # requests of one listing in flight at once (a processor has up to 64 partitions)
# Rows of one partition whose RowKey is in [lo, hi): every listing of the store is one of these.
_RANGE = "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi"


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


class TableCalls:
    """One table client and how the store talks through it; created and closed by
    `TableLeaseStore`, shared by its roles.

    Errors: `run` raises `LeaseStoreUnavailable` for a transient failure or a request that
    outlived its deadline, `LeaseStoreMisconfigured` for a refusal; the outcomes a role expects
    (a row that exists, or does not, or changed) it catches inside its own operation.
    """

    def __init__(self, client: TableClient, *, timeout_s: float) -> None:
        self._client = client
        self._timeout_s = timeout_s
        # requests sent (each attempt, each page of a listing), by kind, and rows listed: what
        # the lease table costs (`cfp_lease_requests_total`, `cfp_lease_rows_listed_total`)
        self.requests: Counter[str] = Counter()
        self.rows_listed = 0

    @property
    def client(self) -> TableClient:
        return self._client

    @property
    def table(self) -> str:
        return self._client.table_name

    async def close(self) -> None:
        await self._client.close()

    async def create_table(self, *, within_s: float) -> None:
        """Create the table if it does not exist yet (any host may; the first one wins),
        retrying transient failures for up to `within_s`."""

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
                await self.run(f"table {self.table}", create, kind="table")

    async def run(self, what: str, op: Callable[[], Awaitable[T]], *, kind: str = "") -> T:
        """Run one store operation under the deadline; `kind` counts it as one request (a
        listing counts its pages itself, in `rows`)."""
        if kind:
            self.requests[kind] += 1
        try:
            async with asyncio.timeout(self._timeout_s):
                return await op()
        except (asyncio.CancelledError, LeaseError):
            raise
        except (HttpResponseError, *_TRANSPORT) as e:
            raise _translate(e, what, self._client.url) from e

    async def run_side_by_side(
        self, what: str, ops: Sequence[Callable[[], Awaitable[T]]]
    ) -> list[T]:
        """Run independent operations (the queries of a listing, one per partition) at the same
        time, at most `SIDE_BY_SIDE` at once, each under its own deadline: a listing then takes
        about one round trip, where one after another under one deadline took their sum, and on
        a busy machine outlived the deadline meant for one request. Their results in the order
        of `ops`.

        Errors: as `run`'s, the first of them; the others are cancelled, and none outlives the
        call. Cancellation: the caller's ends every operation, whatever they raise on the way
        out (an `asyncio.TaskGroup` would give their errors instead)."""
        gate = asyncio.Semaphore(SIDE_BY_SIDE)

        async def one(op: Callable[[], Awaitable[T]]) -> T:
            async with gate:
                return await self.run(what, op)

        tasks = [asyncio.ensure_future(one(op)) for op in ops]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = next((t.exception() for t in tasks if _failed(t)), None)
            if failed is not None:
                raise failed  # as itself, its cause kept: callers catch `LeaseError`
            return [t.result() for t in tasks]
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def rows(self, pk: str, lo: str, hi: str) -> AsyncIterator[TableEntity]:
        """The rows of partition `pk` whose RowKey is in [lo, hi), each page counted as one
        request and each row as listed; iterate it inside `run`, whose deadline then covers
        the partition's pages (one, up to a thousand rows)."""
        pages = self._client.query_entities(_RANGE, parameters={"pk": pk, "lo": lo, "hi": hi})
        async for page in pages.by_page():
            self.requests["list"] += 1
            async for entity in page:
                self.rows_listed += 1
                yield entity


def _failed(task: asyncio.Future[Any]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is not None
