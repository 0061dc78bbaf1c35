"""The host's hints: one observer of its own, fed from the hints queue beside the leases.

The observer is made from the host's factory (inside its context, once entered) and opened
with a context of its own (lease "hints", epoch 0, checkpoints ignored: hints have no position).
An observer that does not take hints (`TakesHints`) is a configuration error, said once, and
the host goes on with the feed alone: hints only ever make data earlier."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from observers import ArrowBatch, CloseReason, PartitionContext
from observers.host_side import host_context
from processor import connection
from processor.clock import Clock
from processor.hints.batches import HINTS_LEASE
from processor.hints.poison import poison_queue_name
from processor.hints.queue_reader import HintCounts, QueuePair, QueueReader
from processor.hints.settings import HintQueue
from processor.plugins.observer_calls import ObserverCalls
from processor.waiting import wait_any

log = structlog.get_logger("cfp.hints")

OPEN_RETRY_S = 10.0  # an observer whose `open` failed is opened again after this long


@dataclass(frozen=True, slots=True)
class _ToObserver:
    """The reader's sink: the hints observer, given each batch whole."""

    calls: ObserverCalls
    ctx: PartitionContext

    async def take(self, batch: ArrowBatch) -> None:
        await self.calls.hints(self.ctx, batch)


@dataclass(frozen=True, slots=True)
class HintSource:
    """Whose hints: the feed's account (a hint naming another is poison) and the processor."""

    account: str
    processor: str
    host_name: str


class HintRunner:
    """Runs the queue's reader for as long as the host runs, into an observer of its own."""

    def __init__(
        self,
        settings: HintQueue,
        source: HintSource,
        new_observer: Callable[[], ObserverCalls],
        counts: HintCounts,
        clock: Clock,
    ) -> None:
        self.settings, self.source, self.new_observer = settings, source, new_observer
        self.counts, self.clock = counts, clock

    async def run(self, stop: asyncio.Event) -> None:
        calls = self.new_observer()
        if not calls.takes_hints:
            log.error(
                "hints.observer_takes_none",
                observer=type(calls.observer).__name__,
                queue=self.settings.name,
                hint="--hints-queue needs an observer with process_hints (log, jsonl, spark)",
            )
            return
        ctx = host_context(
            lease_token=HINTS_LEASE,
            host_name=self.source.host_name,
            epoch=0,
            processor_name=self.source.processor,
            log=structlog.get_logger("cfp.observer").bind(lease=HINTS_LEASE),
        )
        if not await self._opened(calls, ctx, stop):
            await calls.close(ctx, CloseReason.SHUTDOWN)
            return
        conn, name = self.settings.connection_string, self.settings.name
        queues = QueuePair(
            connection.queue_client(conn, name),
            connection.queue_client(conn, poison_queue_name(name)),
        )
        try:
            reader = QueueReader(
                queues,
                self.settings,
                _ToObserver(calls, ctx),
                self.counts,
                account=self.source.account,
                processor=self.source.processor,
                clock=self.clock,
            )
            log.info("hints.reading", queue=name)
            await reader.run(stop)
        finally:
            await queues.hints.close()
            await queues.poison.close()
            await calls.close(ctx, CloseReason.SHUTDOWN)

    async def _opened(
        self, calls: ObserverCalls, ctx: PartitionContext, stop: asyncio.Event
    ) -> bool:
        """Open the observer, again every `OPEN_RETRY_S` while it fails; False if stopped."""
        while not stop.is_set():
            try:
                await calls.open(ctx)
            except Exception as e:
                log.warning("hints.open_failed", error=repr(e), retry_s=OPEN_RETRY_S)
                await wait_any(stop, timeout_s=OPEN_RETRY_S)
            else:
                return True
        return False
