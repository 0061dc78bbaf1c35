"""What a processor delivers, fixed when it is created: its filter and its end time.

Leases remember how far each shard was read, not what was left out on the way; a host with
another filter would deliver a different stream under the same checkpoints. So the first host
of a processor writes its identity into the lease table (insert-if-absent) and every host after
it must match: a different filter or end time is a different processor, with another name.

A processor made before identities existed has leases and no identity row: it delivered
everything, with no end, and that is what gets recorded for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from leases import LeaseStore
from processor.changefeed.change_filter import ChangeFilter, FilterError
from processor.changefeed.selection import parse_event_time


class IdentityMismatch(FilterError):
    """This host's filter or end time is not the processor's."""


@dataclass(frozen=True, slots=True)
class ProcessorIdentity:
    change: ChangeFilter = field(default_factory=ChangeFilter)
    end_time: datetime | None = None  # `--end-time`: events before it, then the leases finish

    def text(self) -> str:
        doc: dict[str, object] = {"filter": self.change.to_json()}
        if self.end_time is not None:
            doc["endTime"] = self.end_time.isoformat()
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_text(cls, text: str, *, where: str) -> ProcessorIdentity:
        """Errors: `FilterError` naming `where`."""
        try:
            doc = json.loads(text) if text else {}
        except ValueError:
            raise FilterError(f"{where}: the identity {text!r} is not JSON") from None
        if not isinstance(doc, dict):
            raise FilterError(f"{where}: the identity {text!r} is not an object")
        end = doc.get("endTime")
        try:
            end_time = parse_event_time(end) if isinstance(end, str) else None
        except ValueError:
            raise FilterError(f"{where}: endTime {end!r} is not a time") from None
        return cls(ChangeFilter.from_json(doc.get("filter", {}), where=where), end_time)

    def describe(self) -> str:
        end = "" if self.end_time is None else f"; ends at {self.end_time.isoformat()}"
        return f"filter: {self.change.describe()}{end}"


async def claim_identity(
    store: LeaseStore,
    ours: ProcessorIdentity,
    *,
    processor: str,
    table: str,
    lease_partitions: int = 1,
) -> ProcessorIdentity:
    """Record `ours` as the processor's identity if it has none, its leases spread over
    `lease_partitions` table partitions; the identity that holds. Errors: `IdentityMismatch`
    when it holds another, `FilterError` when the stored one is unreadable, `LeaseError` from
    the store."""
    where = f"identity row of processor {processor!r} in table {table!r}"
    stored = await store.identity()
    if stored is None:
        legacy = bool(await store.list_leases())  # made before identities: it took everything
        stored = await store.claim_identity(
            ProcessorIdentity().text() if legacy else ours.text(),
            lease_partitions=1 if legacy else lease_partitions,  # its leases stay where they are
        )
    theirs = ProcessorIdentity.from_text(stored, where=where)
    if theirs != ours:
        raise IdentityMismatch(
            f"processor {processor!r} (lease table {table!r}) was created with "
            f"{theirs.describe()}; this host has {ours.describe()}. A processor's filter and end "
            "time are fixed when it is created: run this host with the same ones, or give it "
            "another --processor-name (a new processor, with leases of its own)"
        )
    return theirs
