"""The processor's own rows in the lease table, beside its leases: the hosts' rows (`HostRows`)
and the processor and identity rows (`ProcessorRows`), all in the partition named after the
processor. Each is written by one party or guarded by an insert, so none needs the leases' ETag
policy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from leases.errors import LeaseStoreUnavailable
from leases.reserved_rows import (
    HOST_ROW_PREFIX,
    IDENTITY_ROW,
    PROCESSOR_ROW,
    BalanceNote,
    HostReport,
    ProcessorState,
    key_range,
)
from leases.store.lease_store import retrying
from leases.store.table_calls import TableCalls
from leases.store.table_rows import host_from_row, host_row, note_row, state_from_row, state_row
from leases.store.table_settings import MAX_LEASE_PARTITIONS


class TableHostRows:
    """`HostRows` on Azure Tables: each host writes its own row (presence, every few seconds),
    and `cfp status` and the balancer's peer count list them."""

    def __init__(self, calls: TableCalls, processor: str) -> None:
        self._calls = calls
        self._processor = processor

    async def publish_host(self, report: HostReport) -> None:
        """Write this host's row (unconditionally: only its host writes it)."""

        async def op() -> None:
            await self._calls.client.upsert_entity(
                host_row(self._processor, report), mode=UpdateMode.REPLACE
            )

        await self._calls.run(f"host row {report.name}", op, kind="write")

    async def list_hosts(self) -> list[HostReport]:
        """Every host's row; a row that does not parse is left out."""

        async def op() -> list[HostReport]:
            reports: list[HostReport] = []
            async for e in self._calls.rows(self._processor, *key_range(HOST_ROW_PREFIX)):
                with contextlib.suppress(KeyError, TypeError, ValueError):
                    reports.append(host_from_row(dict(e)))
            return reports

        return await self._calls.run(f"listing hosts of {self._processor}", op)

    async def delete_host(self, name: str) -> None:
        async def op() -> None:
            with contextlib.suppress(ResourceNotFoundError):
                await self._calls.client.delete_entity(self._processor, HOST_ROW_PREFIX + name)

        await self._calls.run(f"host row {name}", op, kind="write")


class TableProcessorRows:
    """`ProcessorRows` on Azure Tables. Also remembers how many partitions the leases are spread
    over, read once from the identity row, for `TableLeaseRows` to place each lease."""

    def __init__(self, calls: TableCalls, processor: str) -> None:
        self._calls = calls
        self._processor = processor
        self._what = f"processor row of {processor}"  # names it in errors
        self._partitions: int | None = None  # from the identity row, once read

    async def processor_state(self) -> ProcessorState:
        """The processor row (not paused when there is none)."""

        async def op() -> ProcessorState:
            try:
                entity = await self._calls.client.get_entity(self._processor, PROCESSOR_ROW)
            except ResourceNotFoundError:
                return ProcessorState()
            return state_from_row(dict(entity))

        return await self._calls.run(self._what, op, kind="read")

    async def set_processor_state(self, state: ProcessorState) -> None:
        await self._upsert(state_row(self._processor, state), UpdateMode.REPLACE)

    async def note_balance(self, note: BalanceNote) -> None:
        await self._upsert(note_row(self._processor, note), UpdateMode.MERGE)

    async def _upsert(self, row: dict[str, Any], mode: UpdateMode) -> None:
        async def op() -> None:
            await self._calls.client.upsert_entity(row, mode=mode)

        await self._calls.run(self._what, op, kind="write")

    async def identity(self) -> str | None:
        async def op() -> str | None:
            try:
                entity = await self._calls.client.get_entity(self._processor, IDENTITY_ROW)
            except ResourceNotFoundError:
                return None
            self._partitions = _partitions_of(entity)
            return str(entity.get("Identity") or "")

        return await self._calls.run(f"identity row of {self._processor}", op, kind="read")

    async def claim_identity(self, text: str, *, lease_partitions: int = 1) -> str:
        async def op() -> bool:
            row = {
                "PartitionKey": self._processor,
                "RowKey": IDENTITY_ROW,
                "Identity": text,
                "LeasePartitions": lease_partitions,
            }
            try:
                await self._calls.client.create_entity(row)
            except ResourceExistsError:
                return False
            self._partitions = lease_partitions
            return True

        what = f"identity row of {self._processor}"
        async for attempt in retrying():
            with attempt:
                # a lost reply may hide our own insert: the stored row says what holds
                if await self._calls.run(what, op, kind="write"):
                    return text
                stored = await self.identity()
                if stored is None:
                    raise LeaseStoreUnavailable(f"{what} vanished")
                return stored
        raise AssertionError("unreachable")  # pragma: no cover

    async def lease_partitions(self) -> int:
        """How many partitions the processor's leases are spread over: its identity row's
        `LeasePartitions`, 1 for a processor made before them (or not made yet)."""
        if self._partitions is None:
            await self.identity()
        return self._partitions or 1


def _partitions_of(entity: Mapping[str, Any]) -> int:
    """An identity row's `LeasePartitions`: 1 when absent (a processor made before it)."""
    value = entity.get("LeasePartitions")
    return value if isinstance(value, int) and 1 <= value <= MAX_LEASE_PARTITIONS else 1
