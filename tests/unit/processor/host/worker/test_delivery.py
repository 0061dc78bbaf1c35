"""Handing one batch to an observer, given the delivery's collaborators one by one: the batch's
origin, the fencing check, and what `--on-observer-error` makes of a batch the observer refuses."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import structlog
import structlog.testing

from leases import HostId, LeaseToken, MemoryLeaseStore
from observers import ArrowBatch, CloseReason, PartitionContext, Unavailable
from processor.host.health.host_progress import HostProgress
from processor.host.host_config import DeliveryPolicy, OnObserverError
from processor.host.leasing.held_lease import HeldLease
from processor.host.worker.dead_letter_folder import DeadLetterFolder
from processor.host.worker.delivery import Delivery, NotDelivered
from processor.host.worker.worker_env import WorkerEnded
from processor.plugins import ObserverChoice
from processor.plugins.observer_calls import ObserverCalls
from tests.unit.fakes import SEGMENT, ManualClock, RecordingObserver, at, batch

TOKEN = LeaseToken("03")
FENCE_AFTER_S = 20.0


class ArrowRecorder:
    """Keeps every batch it is given."""

    def __init__(self) -> None:
        self.batches: list[ArrowBatch] = []

    def process_arrow(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        self.batches.append(batch)


async def delivery(
    observer: object,
    *,
    policy: OnObserverError = OnObserverError.RETRY,
    folder: Path | None = None,
) -> tuple[Delivery, ManualClock]:
    store, clock = MemoryLeaseStore(), ManualClock()
    row = await store.create_if_absent(TOKEN, at(0).to_json())
    assert row is not None
    lease = await store.acquire(row, HostId("h1"))
    assert lease is not None
    held = HeldLease(lease, clock=clock, fence_after_s=FENCE_AFTER_S)
    progress = HostProgress().leases
    progress.started(TOKEN, held.epoch, None)
    made = Delivery(
        held,
        ObserverCalls(observer),
        PartitionContext(lease_token=TOKEN, host_name="h1", epoch=held.epoch),
        structlog.get_logger("test"),
        policy=DeliveryPolicy(ObserverChoice("test"), on_observer_error=policy, attempts=2),
        processor="proc",
        clock=clock,
        progress=progress,
        stop=asyncio.Event(),
        dead_letters=DeadLetterFolder(folder) if folder else None,
    )
    return made, clock


async def test_the_observer_gets_the_batch_with_its_origin() -> None:
    observer = ArrowRecorder()
    made, clock = await delivery(observer)
    accepted = await made.deliver(batch(0, 3), at(0), at(3))
    assert accepted is not NotDelivered.DEAD_LETTERED and accepted is not NotDelivered.HELD_ALREADY
    assert accepted.events == 3 and (made.batches, made.events) == (1, 3)
    (got,) = observer.batches
    assert got.positions.to_pylist() == ["e0", "e1", "e2"]
    origin = got.origin
    assert (origin.lease, origin.segment_path, origin.processor) == (TOKEN, SEGMENT, "proc")
    assert origin.read_at == clock.wall()


async def test_a_lease_not_renewed_in_time_reaches_no_observer() -> None:
    observer = ArrowRecorder()
    made, clock = await delivery(observer)
    clock.now += FENCE_AFTER_S  # past the fencing interval without a renewal
    with pytest.raises(WorkerEnded) as ended:
        await made.deliver(batch(0, 2), at(0), at(2))
    assert ended.value.reason is CloseReason.LEASE_LOST and observer.batches == []


async def test_stop_parks_the_lease_after_its_attempts() -> None:
    made, _ = await delivery(RecordingObserver(refuse=["e0"]), policy=OnObserverError.STOP)
    with pytest.raises(WorkerEnded) as ended:
        await made.deliver(batch(0, 2), at(0), at(2))
    assert ended.value.reason is CloseReason.OBSERVER_ERROR and ended.value.park
    assert "refused e0" in ended.value.error and made.batches == 0


async def test_dead_letter_writes_the_batch_aside_and_goes_on(tmp_path: Path) -> None:
    made, _ = await delivery(
        RecordingObserver(refuse=["e0"]), policy=OnObserverError.DEAD_LETTER, folder=tmp_path
    )
    assert await made.deliver(batch(0, 2), at(0), at(2)) is NotDelivered.DEAD_LETTERED
    (letter,) = tmp_path.rglob("*.jsonl")
    lines = [json.loads(line) for line in letter.read_text().splitlines()]
    assert lines[0]["lease"] == TOKEN and lines[0]["host"] == "h1"
    assert [line["id"] for line in lines[1:]] == ["e0", "e1"]


class AwayThenBack:
    """An observer whose destination is away for its first `away` calls (`Unavailable`)."""

    def __init__(self, away: int) -> None:
        self.away, self.calls, self.batches = away, 0, 0

    def process_arrow(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        self.calls += 1
        if self.calls <= self.away:
            raise Unavailable("spark unavailable since now: sc://a", retry_after_s=0.01)
        self.batches += 1


@pytest.mark.parametrize("policy", [OnObserverError.RETRY, OnObserverError.DEAD_LETTER])
async def test_an_observer_whose_destination_is_away_gets_the_batch_again_uncounted(
    tmp_path: Path, policy: OnObserverError
) -> None:
    """Offered again and again (more times than dead-letter's attempts): never a failure of the
    observer's, never dead-lettered; the host reports the outage instead."""
    observer = AwayThenBack(away=5)
    made, _ = await delivery(observer, policy=policy, folder=tmp_path)
    with structlog.testing.capture_logs() as logged:
        accepted = await made.deliver(batch(0, 2), at(0), at(2))
    assert accepted is not NotDelivered.DEAD_LETTERED and observer.batches == 1
    assert observer.calls == 6 and not list(tmp_path.rglob("*.jsonl"))
    assert made.progress.entries[TOKEN].failures == 0
    assert "observer.retry" not in [e["event"] for e in logged]


async def test_a_stop_ends_the_wait_for_a_destination_that_never_comes_back() -> None:
    observer = AwayThenBack(away=10**9)
    made, _ = await delivery(observer)
    made.stop.set()
    with pytest.raises(WorkerEnded) as ended:
        await made.deliver(batch(0, 2), at(0), at(2))
    assert ended.value.reason is CloseReason.SHUTDOWN and observer.batches == 0
