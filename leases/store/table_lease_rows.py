"""The leases' own rows on Azure Tables: the four primitives (list, read, insert, replace) that
`ConditionalLeaseStore`'s write policy runs over, and where each lease lives.

A processor's leases are spread over `LeasePartitions` partitions (a number fixed in its identity
row when it is created), PartitionKey `NAME~i` with i = CRC-32 of the token mod that number, so
that renewals and listings of many leases do not all fall on one partition. A processor made
before partitions (no `LeasePartitions`) keeps its leases in `NAME`, as do its job leases.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import TableEntity, UpdateMode

from leases.record import Lease, LeaseToken
from leases.reserved_rows import RESERVED_ROWS_FROM, is_reserved
from leases.store.table_calls import TableCalls
from leases.store.table_rows import lease_from_row, lease_row


class TableLeaseRows:
    """Reads and writes lease rows exactly as asked; `TableLeaseStore` decides what to write
    and what a lost race or a lost reply means. Writes return None when the row exists (insert)
    or its ETag did not match (replace)."""

    def __init__(
        self,
        calls: TableCalls,
        processor: str,
        *,
        lease_partitions: Callable[[], Awaitable[int]],
    ) -> None:
        self._calls = calls
        self._processor = processor
        self._lease_partitions = lease_partitions  # read from the identity row on first use

    async def list_rows(self, lo: str, hi: str) -> list[Lease]:
        """The rows whose RowKey is in [lo, hi), from every partition they may be in."""
        partitions = 1 if lo >= RESERVED_ROWS_FROM else await self._lease_partitions()
        keys = [self._processor] if partitions == 1 else partition_keys(self._processor, partitions)

        def query(pk: str) -> Callable[[], Awaitable[list[Lease]]]:
            async def op() -> list[Lease]:
                return [self._lease(e) async for e in self._calls.rows(pk, lo, hi)]

            return op

        found = await self._calls.run_side_by_side(
            f"listing leases of {self._processor}", [query(pk) for pk in keys]
        )
        return [lease for rows in found for lease in rows]

    async def read(self, token: LeaseToken) -> Lease | None:
        pk = self._pk(token, await self._lease_partitions())

        async def op() -> Lease | None:
            try:
                entity = await self._calls.client.get_entity(pk, token)
            except ResourceNotFoundError:
                return None
            return self._lease(entity)

        return await self._calls.run(f"lease {token}", op, kind="read")

    async def insert(self, lease: Lease) -> Lease | None:
        pk = self._pk(lease.token, await self._lease_partitions())

        async def op() -> Lease | None:
            try:
                reply = await self._calls.client.create_entity(lease_row(pk, lease))
            except ResourceExistsError:
                return None
            return _with_etag(lease, reply)

        return await self._calls.run(f"creating lease {lease.token}", op, kind="write")

    async def replace(self, lease: Lease, etag: str) -> Lease | None:
        pk = self._pk(lease.token, await self._lease_partitions())

        async def op() -> Lease | None:
            try:
                reply = await self._calls.client.update_entity(
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

        return await self._calls.run(f"writing lease {lease.token}", op, kind="write")

    def _pk(self, token: str, partitions: int) -> str:
        if partitions == 1 or is_reserved(token):
            return self._processor
        return lease_partition(self._processor, token, partitions)

    def _lease(self, entity: TableEntity) -> Lease:
        return lease_from_row(self._calls.table, dict(entity), str(entity.metadata["etag"]))


def lease_partition(processor: str, token: str, partitions: int) -> str:
    """The PartitionKey of lease `token` of a processor whose leases are spread over
    `partitions` partitions (more than one)."""
    return f"{processor}~{zlib.crc32(token.encode()) % partitions}"


def partition_keys(processor: str, partitions: int) -> list[str]:
    return [f"{processor}~{i}" for i in range(partitions)]


def _with_etag(lease: Lease, reply: Mapping[str, Any]) -> Lease:
    return dataclasses.replace(lease, etag=str(reply["etag"]))
