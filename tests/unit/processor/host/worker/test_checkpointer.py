"""The checkpointer on the in-memory lease store, given its collaborators one by one: what it
writes, what it records, and how a lease taken by another host ends its writes."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from leases import Delivered, HostId, LeaseToken, MemoryLeaseStore
from leases.policy.timings import derive_timings
from observers import CloseReason, LeaseLostError
from processor.host.health.host_progress import HostProgress
from processor.host.leasing.held_lease import HeldLease
from processor.host.worker.checkpoint_ledger import CheckpointLedger
from processor.host.worker.checkpointer import Checkpointer, CheckpointWiring
from processor.host.worker.worker_env import WorkerEnded
from processor.reading.lease_position import LeasePosition
from processor.reading.position_book import PositionBook
from tests.unit.fakes import ManualClock, at

TOKEN = LeaseToken("00")


class RecordingBook(PositionBook):
    """The position book, keeping what the checkpointer told it."""

    def __init__(self, store: MemoryLeaseStore) -> None:
        super().__init__(store.list_leases, refresh_s=1)
        self.told: list[tuple[str, LeasePosition]] = []

    def set(self, token: str, position: LeasePosition) -> None:
        self.told.append((token, position))
        super().set(token, position)


async def held_checkpointer(
    caught_up: asyncio.Event | None = None,
) -> tuple[Checkpointer, MemoryLeaseStore, RecordingBook, asyncio.Event]:
    store, clock = MemoryLeaseStore(), ManualClock()
    row = await store.create_if_absent(TOKEN, at(0).to_json())
    assert row is not None
    lease = await store.acquire(row, HostId("h1"))
    assert lease is not None
    timings = derive_timings(30.0, poll_s=0.01)
    book, stop = RecordingBook(store), asyncio.Event()
    checkpointer = Checkpointer(
        HeldLease(lease, clock=clock, fence_after_s=timings.fence_after_s),
        CheckpointLedger.at(at(0)),
        structlog.get_logger("test"),
        CheckpointWiring(
            store=store,
            book=book,
            clock=clock,
            progress=HostProgress().leases,
            timings=timings,
            stop=stop,
            caught_up=caught_up,
        ),
    )
    return checkpointer, store, book, stop


async def stored(store: MemoryLeaseStore) -> LeasePosition:
    row = await store.get(TOKEN)
    assert row is not None
    return LeasePosition.from_json(row.continuation)


async def test_a_batch_accepted_is_written_with_what_it_delivered() -> None:
    checkpointer, store, book, _ = await held_checkpointer()
    checkpointer.ledger.accepted(at(5), events=5, event_bytes=500, last=None)
    await checkpointer.write(at(5), caught_up=False)
    assert await stored(store) == at(5)
    row = await store.get(TOKEN)
    assert row is not None and (row.events, row.event_bytes) == (5, 500)
    assert checkpointer.ledger.all_confirmed()
    assert book.told == [(TOKEN, at(5))]  # the segment barrier sees it at once


async def test_caught_up_is_written_once_every_batch_is_confirmed_and_then_signalled() -> None:
    signal = asyncio.Event()
    checkpointer, store, _, _ = await held_checkpointer(caught_up=signal)
    checkpointer.ledger.accepted(at(3), events=3, event_bytes=30, last=None)
    assert await checkpointer.caught_up(at(3)) is False  # not confirmed: nothing written
    assert (await stored(store)) == at(0) and not signal.is_set()
    await checkpointer.write(at(3), caught_up=False)
    assert await checkpointer.caught_up(at(3)) is False  # caught up, not finished
    row = await store.get(TOKEN)
    assert row is not None and row.caught_up and signal.is_set()


async def test_a_lease_another_host_took_ends_the_write_as_lost() -> None:
    checkpointer, store, _, _ = await held_checkpointer()
    row = await store.get(TOKEN)
    assert row is not None
    assert await store.acquire(row, HostId("h2")) is not None  # taken over: a new epoch
    checkpointer.ledger.advanced(at(2))
    with pytest.raises(WorkerEnded) as ended:
        await checkpointer.confirm_delivered()
    assert ended.value.reason is CloseReason.LEASE_LOST
    assert checkpointer.held.is_lost and await stored(store) == at(0)
    with pytest.raises(LeaseLostError):  # what an observer's ctx.checkpoint() raises then
        await checkpointer.for_observer(None)


async def test_waiting_for_confirmations_ends_when_the_host_stops() -> None:
    checkpointer, _, _, stop = await held_checkpointer()
    checkpointer.ledger.accepted(at(4), events=4, event_bytes=40, last=None)
    waiting = asyncio.create_task(checkpointer.all_confirmed())
    await asyncio.sleep(0)
    assert not waiting.done()
    stop.set()
    with pytest.raises(WorkerEnded) as ended:
        await waiting
    assert ended.value.reason is CloseReason.SHUTDOWN


async def test_nothing_new_to_confirm_writes_nothing() -> None:
    checkpointer, store, _, _ = await held_checkpointer()
    before = await store.get(TOKEN)
    await checkpointer.confirm_delivered()
    assert await store.get(TOKEN) == before
    assert checkpointer.ledger.pending == Delivered()
