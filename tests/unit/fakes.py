"""Stand-ins for unit tests of the host's logic: a clock moved by hand, a reader that hands out
a script of steps, and an observer that records (or refuses) what it is given."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path

from leases import HostId
from leases.policy.timings import Timings
from observers import ChangeEvent, PartitionContext
from processor.changefeed.position import ShardPosition
from processor.host.host_config import DeliveryPolicy, HostConfig, Placement
from processor.plugins import ObserverChoice
from processor.reading.lease_batch import LeaseBatch
from processor.reading.lease_position import LeasePosition
from processor.reading.lease_reader import LeaseRead, Step

SEGMENT = "idx/segments/2026/01/01/0000/meta.json"


class ManualClock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return datetime.fromtimestamp(self.now, UTC)


def at(i: int) -> LeasePosition:
    """The i-th position of one shard's chunk."""
    return LeasePosition(SEGMENT, False, ShardPosition("log/00/2026/01/01/0000/00000.avro", i))


def fake_batch(records: list[dict[str, object]]) -> LeaseBatch:
    """A lease's batch of these records, their ids as positions, as if 100 bytes were read."""
    ids = [str(r["id"]) for r in records]
    return replace(LeaseBatch.of_records(SEGMENT, records, ids), read_bytes=100, read_share=100)


def record(i: int) -> dict[str, object]:
    return {
        "id": f"e{i}",
        "eventType": "BlobCreated",
        "subject": f"/b/{i}",
        "eventTime": "2026-01-01T00:00:00Z",
        "data": {"sequencer": f"{i:08}"},
    }


def batch(first: int, n: int) -> LeaseBatch:
    return fake_batch([record(i) for i in range(first, first + n)])


@dataclass(slots=True)
class ScriptedReader:
    """Hands out `steps` in order (an exception is raised: bad data met), then says caught up
    for ever; `before_read` runs first. An exception next in line is bad data known ahead."""

    steps: list[LeaseRead | Exception]
    position: LeasePosition = field(default_factory=LeasePosition)
    before_read: Callable[[int], Awaitable[None]] | None = None  # given the read's number
    holding: Callable[[LeasePosition], bool] | None = None  # nothing new yet at this position
    reads: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)  # said "caught up" once

    def reset(self) -> None:
        pass

    def bad_data_ahead(self) -> Exception | None:
        return self.steps[0] if self.steps and isinstance(self.steps[0], Exception) else None

    async def read(self, **_: object) -> LeaseRead:
        if self.before_read is not None:
            await self.before_read(self.reads)
        self.reads += 1
        await asyncio.sleep(0)
        held = self.holding is not None and self.holding(self.position)
        if self.steps and not held:
            step = self.steps.pop(0)
            if isinstance(step, Exception):
                raise step
        else:
            step = LeaseRead(Step.CAUGHT_UP, self.position)
        if step.step is Step.CAUGHT_UP:
            self.idle.set()
        self.position = step.position
        return step


def batches(*sizes: int) -> list[LeaseRead]:
    """Reads of consecutive batches of these sizes, from position 0."""
    steps, i = [], 0
    for n in sizes:
        steps.append(LeaseRead(Step.BATCH, at(i + n), batch(i, n)))
        i += n
    return steps


class RecordingObserver:
    """Records the ids of each batch; refuses those whose first id is in `refuse`."""

    def __init__(self, refuse: Sequence[str] = (), *, auto_checkpoint: bool = True) -> None:
        self.seen: list[list[str]] = []
        self.refuse = set(refuse)
        self.auto_checkpoint = auto_checkpoint
        self.marks: list[object] = []
        self.ctx: PartitionContext | None = None

    def process_changes(self, ctx: PartitionContext, events: Sequence[ChangeEvent]) -> None:
        ids = [e.id for e in events]
        if ids and ids[0] in self.refuse:
            raise RuntimeError(f"refused {ids[0]}")
        self.seen.append(ids)
        self.marks.append(ctx.mark())
        self.ctx = ctx


def in_memory_config(name: str, observer: str, timings: Timings) -> HostConfig:
    """A host of processor "p" over in-memory stores (no connection string is read)."""
    placement = Placement("", "", lease_table="leases", processor_name="p", host_name=HostId(name))
    return HostConfig(placement, DeliveryPolicy(ObserverChoice(observer)), timings)


RAW = {  # one change feed record, as the service writes it (schema version 5)
    "schemaVersion": 5,
    "topic": "/subscriptions/x",
    "subject": "/blobServices/default/containers/photos/blobs/2026/a b.jpg",
    "eventType": "BlobCreated",
    "eventTime": "2026-03-04T05:06:07.1234567Z",
    "id": "e-1",
    "data": {"sequencer": "00000000000000010000000000000002000000000000001d", "api": "PutBlob"},
}


class Shape(Enum):
    WIDE = "wide"
    NARROW = "narrow"


@dataclass(frozen=True)
class ArchiveOptions:
    """A plugin's options, one field of each kind `--observer-option` converts to."""

    directory: Path
    rows: int = 1000
    ratio: float = 0.5
    compress: bool = True
    shape: Shape = Shape.WIDE
    prefix: str | None = None
    columns: tuple[str, ...] = field(default=(), metadata={"help": "kept columns"})

    def __post_init__(self) -> None:
        if self.rows < 1:
            raise ValueError("rows must be at least 1")
