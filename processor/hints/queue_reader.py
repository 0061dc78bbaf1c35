"""The competing consumer of a hints queue: every host of a processor reads the same queue, each
message hidden from the others for `visibility_timeout_s` while one host holds it.

A message is deleted only once it is settled: its hint accepted by the observer, its event one
the feed never records, or its poison copy written to `<queue>-poison`. A host that dies holding
messages loses none: they become visible again and another host takes them. A bad message never
stops the host; neither does the queue failing (the feed goes on without hints)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import structlog
from azure.core.exceptions import AzureError, ResourceExistsError, ResourceNotFoundError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_random_exponential

from observers.events import ArrowBatch
from processor.clock import Clock
from processor.hints.batches import hint_batch
from processor.hints.messages import Hint, Ignored, Poison, PoisonReason, read_message
from processor.hints.poison import Delivery, poison_copy
from processor.hints.settings import HintQueue
from processor.waiting import wait_any

PAGE = 32  # the most messages one receive returns
DELETES_AT_ONCE = 16
PAGES_AT_ONCE = 8  # pages whose hints are with the sink at once (a sink may write them together)


class HintSink(Protocol):
    """Where hints go: returns once they are safe there; raises when they were not accepted."""

    async def take(self, batch: ArrowBatch) -> None: ...


class HintCounts(Protocol):
    """What the reader reports (the host's freshness recorder)."""

    def reads(self, on: bool) -> None: ...
    def received(self, messages: int) -> None: ...
    def ignored(self) -> None: ...
    def poisoned(self, reason: PoisonReason) -> None: ...
    def not_accepted(self, hints: int) -> None: ...
    def hints_delivered(self, event_times: Sequence[datetime], at: datetime) -> None: ...


class Queues(Protocol):
    """The two queues (an `azure.storage.queue.aio.QueueClient` each)."""

    @property
    def hints(self) -> Any: ...
    @property
    def poison(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class QueuePair:
    hints: Any
    poison: Any


class QueueReader:
    """Reads `queues.hints` until stopped and hands each page's hints to `sink`."""

    def __init__(
        self,
        queues: Queues,
        settings: HintQueue,
        sink: HintSink,
        counts: HintCounts,
        *,
        account: str,
        processor: str,
        clock: Clock,
    ) -> None:
        self.queues, self.settings, self.sink, self.counts = queues, settings, sink, counts
        self.account, self.processor, self.clock = account, processor, clock
        self.log = structlog.get_logger("cfp.hints").bind(queue=settings.name)
        self._deleting: set[asyncio.Task[None]] = set()
        self._deletes = asyncio.Semaphore(DELETES_AT_ONCE)
        self._handing: set[asyncio.Task[None]] = set()  # pages' hints with the sink
        self._pages = asyncio.Semaphore(PAGES_AT_ONCE)
        self._poison_ready = False
        self._refusals = 0  # pages in a row the sink did not accept
        self.totals: Counter[str] = Counter()  # what became of the messages, logged at the end

    async def run(self, stop: asyncio.Event) -> None:
        """Receive, settle, repeat, until `stop`; then let what is under way finish (at most a
        visibility timeout: after it, what is not settled comes back to another host anyway)."""
        self.counts.reads(True)
        try:
            while not stop.is_set():
                received = await self._page_with_retries(stop)
                if received < PAGE or self._refusals:
                    await wait_any(stop, timeout_s=self._pause())
        finally:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.visibility_timeout_s):
                    await self.settled()
            self.counts.reads(False)
            self.log.info("hints.stopped", **self.totals)

    async def settled(self) -> None:
        """Once the pages received so far are settled: their hints with the sink, their
        messages deleted (or left to come back)."""
        while self._handing or self._deleting:
            await asyncio.gather(*self._handing, *self._deleting, return_exceptions=True)

    def _pause(self) -> float:
        """The wait before the next receive: the poll interval, longer while the sink refuses."""
        return float(min(self.settings.poll_interval_s * 2**self._refusals, 30.0))

    async def _page_with_retries(self, stop: asyncio.Event) -> int:
        """One page, the queue's failures retried (with backoff, until stopped): 0 if stopped."""

        def log_retry(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            missing = isinstance(error, ResourceNotFoundError)
            self.log.warning(
                "hints.queue_missing" if missing else "hints.queue_failed",
                attempt=state.attempt_number,
                error=type(error).__name__,
                status=getattr(error, "status_code", None),
            )

        async def pause(seconds: float) -> None:
            await wait_any(stop, timeout_s=seconds)

        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type((AzureError, OSError, TimeoutError)),
            wait=wait_random_exponential(multiplier=0.5, max=30.0),
            stop=lambda _: stop.is_set(),
            sleep=pause,
            before_sleep=log_retry,
            retry_error_callback=lambda _: 0,
        ):
            with attempt:
                return await self._page()
        return 0

    async def _page(self) -> int:
        messages = [
            m
            async for m in self.queues.hints.receive_messages(
                messages_per_page=PAGE,
                max_messages=PAGE,
                visibility_timeout=self.settings.visibility_timeout_s,
            )
        ]
        if not messages:
            return 0
        self.counts.received(len(messages))
        self.totals["received"] += len(messages)
        received_at = self.clock.wall()
        hints: list[tuple[Any, Hint]] = []
        settled: list[Any] = []
        for message in messages:
            read = self._read(message)
            if isinstance(read, Hint):
                hints.append((message, read))
            elif isinstance(read, Ignored):
                self.counts.ignored()
                self.totals["ignored"] += 1
                settled.append(message)
            elif await self._poison(message, read):
                settled.append(message)
        for message in settled:
            self._delete_later(message)
        if hints:  # the next page is received while the sink takes these (a few at once)
            await self._pages.acquire()
            task = asyncio.create_task(self._hand_over(hints, received_at))
            self._handing.add(task)
            task.add_done_callback(self._handing.discard)
        return len(messages)

    async def _hand_over(self, hints: list[tuple[Any, Hint]], received_at: datetime) -> None:
        try:
            if await self._deliver([h for _, h in hints], received_at):
                for message, _ in hints:
                    self._delete_later(message)
        finally:
            self._pages.release()

    def _read(self, message: Any) -> Hint | Ignored | Poison:
        read = read_message(str(message.content or ""), account=self.account)
        if isinstance(read, Hint) and message.dequeue_count > self.settings.max_deliveries:
            return Poison(
                PoisonReason.UNDELIVERABLE,
                f"not accepted in {message.dequeue_count - 1} deliveries",
            )
        return read

    async def _deliver(self, hints: Sequence[Hint], received_at: datetime) -> bool:
        """Whether the sink accepted `hints`; its error is logged, never raised."""
        try:
            await self.sink.take(hint_batch(hints, self.processor, received_at))
        except Exception as e:  # the observer's: its messages come back after the timeout
            self._refusals += 1
            self.counts.not_accepted(len(hints))
            self.log.warning("hints.not_accepted", hints=len(hints), error=repr(e))
            return False
        self._refusals = 0
        self.totals["delivered"] += len(hints)
        self.counts.hints_delivered([h.event_time for h in hints], self.clock.wall())
        return True

    async def _poison(self, message: Any, poison: Poison) -> bool:
        """Copy `message` to the poison queue with its reason; False if the copy failed (the
        message then stays, to come back)."""
        text = str(message.content or "")
        came = Delivery(
            self.settings.name, str(message.id), int(message.dequeue_count), message.inserted_on
        )
        self.log.warning(
            "hints.poison",
            reason=poison.reason.value,
            detail=poison.detail,
            message_id=came.message_id,
            dequeue_count=came.dequeue_count,
            chars=len(text),
        )
        try:
            if not self._poison_ready:
                with contextlib.suppress(ResourceExistsError):
                    await self.queues.poison.create_queue()
                self._poison_ready = True
            await self.queues.poison.send_message(
                poison_copy(text, poison.reason, poison.detail, came), time_to_live=-1
            )
        except (AzureError, OSError, TimeoutError) as e:
            self.log.warning("hints.poison_failed", message_id=came.message_id, error=repr(e))
            return False
        self.counts.poisoned(poison.reason)
        self.totals["poison"] += 1
        return True

    def _delete_later(self, message: Any) -> None:
        task = asyncio.create_task(self._delete(message))
        self._deleting.add(task)
        task.add_done_callback(self._deleting.discard)

    async def _delete(self, message: Any) -> None:
        async with self._deletes:
            try:
                await self.queues.hints.delete_message(message)
            except ResourceNotFoundError:
                pass  # gone already: its timeout ran out and another host settled it
            except (AzureError, OSError, TimeoutError) as e:  # it comes back: a repeat
                self.log.info("hints.delete_failed", message_id=message.id, error=repr(e))
