"""`--observer spark`: each lease's batches into the host's shared `SparkSink`.

`process_changes` turns the batch into Arrow rows, queues them (so reading goes on while Spark
writes) and takes a mark; the sink checkpoints that mark once the batch is in the change log and
the state table. A failed write fails the lease's next call, so the worker closes it with
OBSERVER_ERROR and the batches are read again from the last checkpoint.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType

import structlog

from observers.errors import ReplayRequired
from observers.protocol import ChangeEvent, CloseReason, LeaseLostError, PartitionContext
from observers.spark.schema import changes_table
from observers.spark.session import SparkOptions
from observers.spark.sink import SparkSink

log = structlog.get_logger("cfp.spark")


class SparkWriteError(ReplayRequired):
    """A Spark write holding this lease's batch failed; the lease cannot go on past it."""


CLOSE_TIMEOUT_S = 120.0


class SparkObserver:
    auto_checkpoint = False

    def __init__(self, sink: SparkSink) -> None:
        self.sink = sink
        self._in_flight: list[asyncio.Future[None]] = []

    async def open(self, ctx: PartitionContext) -> None:
        self.sink.forget_tail(ctx.lease_token)

    async def process_changes(self, ctx: PartitionContext, events: Sequence[ChangeEvent]) -> None:
        self._raise_failed()
        mark = ctx.mark()

        async def checkpoint() -> None:
            try:
                await ctx.checkpoint(mark)
            except LeaseLostError:
                # in both tables already; the lease's next owner replays it, adding nothing
                ctx.log.info("spark.checkpoint_refused")

        future = await self.sink.submit(ctx.lease_token, changes_table(events), checkpoint)
        self._in_flight.append(future)

    async def close(self, ctx: PartitionContext, reason: CloseReason) -> None:
        """Wait until every queued batch of this lease is written and checkpointed."""
        if self._in_flight:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await asyncio.gather(*self._in_flight, return_exceptions=True)
        self._raise_failed()

    def _raise_failed(self) -> None:
        done = [f for f in self._in_flight if f.done()]
        self._in_flight = [f for f in self._in_flight if not f.done()]
        for f in done:
            error = f.exception()
            if error is not None:
                self._in_flight = [f]  # sticky: this lease cannot go on past a lost batch
                raise SparkWriteError(f"spark write failed: {error!r}") from error


class SparkObserverFactory:
    """One Spark session and sink per host, one `SparkObserver` per lease.

    The change log is a set of events, which needs no order across segments: the host drops the
    segment barrier, which would otherwise hold every segment until the previous one's Spark
    write is checkpointed."""

    needs_segment_order = False

    def __init__(self, options: SparkOptions, *, host_name: str) -> None:
        self.options = options
        self.sink = SparkSink(options, host=host_name)

    def __call__(self) -> SparkObserver:
        return SparkObserver(self.sink)

    async def __aenter__(self) -> SparkObserverFactory:
        await self.sink.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.sink.__aexit__(exc_type, exc, tb)
