"""An in-process lease store with the same ETag semantics as the table store.

For unit tests of the host, and for single-process runs that need no coordination. It runs the
same write policy (`ConditionalLeaseStore`) as the table store; only the four primitives differ.
"""

from __future__ import annotations

import dataclasses
import itertools

from leases.record import Lease, LeaseToken
from leases.reserved_rows import BalanceNote, HostReport, ProcessorState
from leases.store.lease_store import ConditionalLeaseStore


class MemoryLeaseStore(ConditionalLeaseStore):
    def __init__(self) -> None:
        self._rows: dict[LeaseToken, Lease] = {}
        self._etags = itertools.count(1)
        self._hosts: dict[str, HostReport] = {}
        self._processor = ProcessorState()
        self._identity: str | None = None
        self._partitions = 1

    def _stamp(self, lease: Lease) -> Lease:
        row = dataclasses.replace(lease, etag=f'W/"{next(self._etags)}"')
        self._rows[lease.token] = row
        return row

    async def _list(self, lo: str, hi: str) -> list[Lease]:
        return [row for token, row in self._rows.items() if lo <= token < hi]

    async def _read(self, token: LeaseToken) -> Lease | None:
        return self._rows.get(token)

    async def _insert(self, lease: Lease) -> Lease | None:
        if lease.token in self._rows:
            return None
        return self._stamp(lease)

    async def _replace(self, lease: Lease, etag: str) -> Lease | None:
        current = self._rows.get(lease.token)
        if current is None or current.etag != etag:
            return None
        return self._stamp(lease)

    async def publish_host(self, report: HostReport) -> None:
        self._hosts[report.name] = report

    async def list_hosts(self) -> list[HostReport]:
        return list(self._hosts.values())

    async def delete_host(self, name: str) -> None:
        self._hosts.pop(name, None)

    async def processor_state(self) -> ProcessorState:
        return self._processor

    async def set_processor_state(self, state: ProcessorState) -> None:
        self._processor = state

    async def note_balance(self, note: BalanceNote) -> None:
        self._processor = dataclasses.replace(self._processor, balance=note)

    async def identity(self) -> str | None:
        return self._identity

    async def claim_identity(self, text: str, *, lease_partitions: int = 1) -> str:
        if self._identity is None:
            self._identity, self._partitions = text, lease_partitions
        return self._identity

    async def lease_partitions(self) -> int:
        """Recorded, not used: one process's memory has no partitions."""
        return self._partitions
