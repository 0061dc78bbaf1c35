"""A lease's batch (`LeaseBatch`): the reading layer's form of a batch, what a worker gets from
its lease's reader, whether the events were read from the lease's shard or listed by the initial
scan; it becomes the observers' `ArrowBatch` once the worker names its origin."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from observers import ArrowBatch, Origin
from processor.changefeed.shard_batch import ShardBatch


@dataclass(frozen=True, slots=True)
class LeaseBatch:
    """`len()` events of one segment (`segment`: its manifest's path, or the scan's id), and the
    feed's bytes reading them moved past (`read_bytes`) or was spent on (`read_share`; see
    `ShardBatch`). `arrow(origin)` gives the events as observers get them (`origin.segment_path`
    is this batch's segment)."""

    segment: str
    events: int
    arrow: Callable[[Origin], ArrowBatch]
    read_bytes: int = 0
    read_share: int = 0

    @classmethod
    def of_shard(cls, batch: ShardBatch) -> LeaseBatch:
        """A batch of the lease's shard: its records' columns as decoded (never copied)."""

        def columns(origin: Origin) -> ArrowBatch:
            return ArrowBatch(batch.table, batch.positions(), origin, json=batch.json)

        return cls(batch.segment, len(batch), columns, batch.read_bytes, batch.read_share)

    @classmethod
    def of_records(
        cls, segment: str, records: Sequence[Mapping[str, Any]], positions: Sequence[str]
    ) -> LeaseBatch:
        """A batch of records made in Python (the initial scan's), at their `positions`."""

        def columns(origin: Origin) -> ArrowBatch:
            return ArrowBatch.from_records(records, positions, origin)

        return cls(segment, len(records), columns)

    def __len__(self) -> int:
        return self.events
