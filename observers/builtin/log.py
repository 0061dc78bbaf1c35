"""`--observer log`: one structured log line per batch (and per batch of hints, with
`--hints-queue`); for trying things out."""

from __future__ import annotations

from collections.abc import Sequence

from observers.events import ArrowBatch
from observers.protocol import ChangeEvent, CloseReason, PartitionContext


class LogObserver:
    async def open(self, ctx: PartitionContext) -> None:
        ctx.log.info("observer.open")

    async def process_changes(self, ctx: PartitionContext, events: Sequence[ChangeEvent]) -> None:
        if events:
            ctx.log.info(
                "observer.batch",
                events=len(events),
                first=events[0].event_time.isoformat(),
                last=events[-1].event_time.isoformat(),
            )

    async def process_hints(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        if len(batch):
            rows = batch.changes()
            blobs = zip(rows["container"].to_pylist(), rows["blob"].to_pylist(), strict=True)
            ctx.log.info(
                "observer.hints",
                hints=len(batch),
                blobs=len(set(blobs)),
                newest=max(rows["event_time"].to_pylist()).isoformat(),
            )

    async def close(self, ctx: PartitionContext, reason: CloseReason) -> None:
        ctx.log.info("observer.close", reason=reason.value)
