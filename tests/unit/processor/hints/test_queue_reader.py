"""The queue's reader against an in-memory queue: what is settled is deleted, what the observer
refuses stays to come back, a hint refused too often is poison, and a failing queue is waited
out. (Against a real Azurite queue and real hosts: tests/integration/test_hints.py.)"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from azure.core.exceptions import ServiceRequestError

from observers import ArrowBatch
from processor.clock import SystemClock
from processor.emulator.grid_events import grid_event, queue_text
from processor.hints.messages import PoisonReason
from processor.hints.queue_reader import QueuePair, QueueReader
from processor.hints.settings import HintQueue
from tests.unit.processor.hints.test_messages import ACCOUNT, feed_record

_ids = itertools.count()


@dataclass
class Message:
    content: str
    id: str = field(default_factory=lambda: f"m{next(_ids)}")
    dequeue_count: int = 0
    inserted_on: datetime = datetime(2026, 12, 7, tzinfo=UTC)
    visible: bool = True


@dataclass
class MemoryQueue:
    """The calls of `QueueClient` the reader makes."""

    messages: list[Message] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    fail_receives: int = 0  # the next receives that fail as a dropped connection would
    fail_sends: bool = False
    emptied: asyncio.Event = field(default_factory=asyncio.Event)

    def receive_messages(self, **kwargs: Any) -> AsyncIterator[Message]:
        if self.fail_receives:
            self.fail_receives -= 1
            raise ServiceRequestError("connection refused")
        page = [m for m in self.messages if m.visible][: kwargs["max_messages"]]
        for m in page:
            m.visible, m.dequeue_count = False, m.dequeue_count + 1

        async def items() -> AsyncIterator[Message]:
            for m in page:
                yield m

        return items()

    async def delete_message(self, message: Message) -> None:
        self.messages.remove(message)
        if not self.messages:
            self.emptied.set()

    async def create_queue(self) -> None:
        pass

    async def send_message(self, text: str, **kwargs: Any) -> None:
        if self.fail_sends:
            raise ServiceRequestError("connection refused")
        self.sent.append(text)

    def time_out(self) -> None:
        """Every held message visible again (its visibility timeout ran out)."""
        for m in self.messages:
            m.visible = True


@dataclass
class Sink:
    batches: list[ArrowBatch] = field(default_factory=list)
    refuse: bool = False

    async def take(self, batch: ArrowBatch) -> None:
        if self.refuse:
            raise RuntimeError("not now")
        self.batches.append(batch)


@dataclass
class Counts:
    calls: list[tuple[str, object]] = field(default_factory=list)

    def reads(self, on: bool) -> None:
        self.calls.append(("reads", on))

    def received(self, messages: int) -> None:
        self.calls.append(("received", messages))

    def ignored(self) -> None:
        self.calls.append(("ignored", 1))

    def poisoned(self, reason: PoisonReason) -> None:
        self.calls.append(("poisoned", reason))

    def not_accepted(self, hints: int) -> None:
        self.calls.append(("not_accepted", hints))

    def hints_delivered(self, event_times: Sequence[datetime], at: datetime) -> None:
        self.calls.append(("delivered", len(event_times)))


def _hint_text(**changes: Any) -> str:
    event = grid_event(feed_record(**changes))
    assert event is not None
    return queue_text(event)


def _renamed() -> str:
    event = grid_event(feed_record())
    assert event is not None
    return queue_text({**event, "eventType": "Microsoft.Storage.BlobRenamed"})


def _reader(queue: MemoryQueue, poison: MemoryQueue, sink: Sink, counts: Counts) -> QueueReader:
    settings = HintQueue("hints", "", max_deliveries=2, poll_interval_s=0.01)
    return QueueReader(
        QueuePair(queue, poison), settings, sink, counts,
        account=ACCOUNT, processor="proc", clock=SystemClock(),
    )  # fmt: skip


async def _settle(reader: QueueReader) -> None:
    await reader.settled()


async def test_a_page_settles_hints_ignored_events_and_poison_and_deletes_them() -> None:
    queue, poison, sink, counts = MemoryQueue(), MemoryQueue(), Sink(), Counts()
    queue.messages = [Message(_hint_text()), Message(_renamed()), Message("rubbish")]
    reader = _reader(queue, poison, sink, counts)
    assert await reader._page() == 3
    await _settle(reader)
    assert queue.messages == []
    assert [len(b) for b in sink.batches] == [1] and sink.batches[0].provisional
    assert [orjson.loads(t)["reason"] for t in poison.sent] == ["unparsable"]
    assert ("poisoned", PoisonReason.UNPARSABLE) in counts.calls
    assert ("ignored", 1) in counts.calls and ("delivered", 1) in counts.calls


async def test_hints_the_observer_refuses_stay_and_come_back_then_go_to_poison() -> None:
    queue, poison, sink, counts = MemoryQueue(), MemoryQueue(), Sink(refuse=True), Counts()
    queue.messages = [Message(_hint_text()), Message("rubbish")]
    reader = _reader(queue, poison, sink, counts)
    await reader._page()
    await _settle(reader)
    assert [m.content for m in queue.messages] == [_hint_text()]  # the poison went
    assert ("not_accepted", 1) in counts.calls
    for _ in range(2):  # max_deliveries=2: refused twice in all
        queue.time_out()
        await reader._page()
        await _settle(reader)
    assert queue.messages == []
    reasons = [orjson.loads(t)["reason"] for t in poison.sent]
    assert reasons == ["unparsable", "undeliverable"]


async def test_a_message_whose_poison_copy_fails_stays() -> None:
    queue, poison, sink, counts = MemoryQueue(), MemoryQueue(fail_sends=True), Sink(), Counts()
    queue.messages = [Message("rubbish")]
    reader = _reader(queue, poison, sink, counts)
    await reader._page()
    await _settle(reader)
    assert len(queue.messages) == 1 and not any(c[0] == "poisoned" for c in counts.calls)


async def test_a_failing_queue_is_waited_out_and_the_run_ends_when_told() -> None:
    queue, poison, sink, counts = MemoryQueue(fail_receives=2), MemoryQueue(), Sink(), Counts()
    queue.messages = [Message(_hint_text(id=f"e{i}")) for i in range(40)]
    reader = _reader(queue, poison, sink, counts)
    stop = asyncio.Event()
    running = asyncio.create_task(reader.run(stop))
    await queue.emptied.wait()
    stop.set()
    await running
    assert sum(len(b) for b in sink.batches) == 40
    assert [len(b) for b in sink.batches][:1] == [32]  # a page is at most 32 messages


@pytest.mark.parametrize("account", ["otheraccount"])
async def test_hints_of_another_account_are_poison(account: str) -> None:
    queue, poison, sink, counts = MemoryQueue(), MemoryQueue(), Sink(), Counts()
    queue.messages = [Message(_hint_text(topic=feed_record()["topic"].replace(ACCOUNT, account)))]
    reader = _reader(queue, poison, sink, counts)
    await reader._page()
    await _settle(reader)
    assert [orjson.loads(t)["reason"] for t in poison.sent] == ["other_account"]
    assert sink.batches == []
