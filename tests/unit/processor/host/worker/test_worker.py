"""A worker in-process, on the in-memory lease store with a scripted reader: what reaches the
observer, what is checkpointed and in which order, and how each way of ending leaves the lease."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from leases import HostId, Lease, LeaseToken, MemoryLeaseStore
from leases.policy.timings import derive_timings
from observers import ChangeEvent, CloseReason, PartitionContext
from processor.changefeed.errors import UndecodableBlockError
from processor.host.health.host_progress import HostProgress
from processor.host.host_config import DeliveryPolicy, OnObserverError, Reading
from processor.host.leasing.held_lease import HeldLease
from processor.host.running.drain_budget import DrainBudget
from processor.host.worker.dead_letter_folder import DeadLetterFolder
from processor.host.worker.worker import Worker
from processor.host.worker.worker_env import WorkerDeps, WorkerEnv, WorkerPolicy, WorkerSignals
from processor.plugins import ObserverChoice
from processor.reading.lease_position import LeasePosition
from processor.reading.lease_reader import LeaseRead, Step
from processor.reading.position_book import PositionBook
from tests import patience
from tests.unit.fakes import ManualClock, RecordingObserver, ScriptedReader, at, batches, fake_batch

TOKEN = LeaseToken("00")


class CheckpointLog(MemoryLeaseStore):
    """The in-memory store, keeping every checkpoint written in order."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[LeasePosition] = []

    async def checkpoint(self, held: Lease, continuation: str, **kwargs: Any) -> Lease | None:
        row = await super().checkpoint(held, continuation, **kwargs)
        if row is not None:
            self.written.append(LeasePosition.from_json(continuation))
        return row


@dataclass
class Running:
    task: asyncio.Task[CloseReason]
    env: WorkerEnv
    store: CheckpointLog
    clock: ManualClock
    reader: ScriptedReader


async def start(
    observer: RecordingObserver,
    steps: list[LeaseRead],
    *,
    tmp_path: Path | None = None,
    before_read: Any = None,
    policy: OnObserverError = OnObserverError.RETRY,
    feed_changed: Any = None,
    poll_s: float = 0.05,
    drain: DrainBudget | None = None,
) -> Running:
    store, clock = CheckpointLog(), ManualClock()
    row = await store.create_if_absent(TOKEN, at(0).to_json())
    assert row is not None
    lease = await store.acquire(row, HostId("h1"))
    assert lease is not None
    timings = derive_timings(30.0, poll_s=poll_s)
    env = WorkerEnv(
        WorkerDeps(
            store=store,
            catalog=None,  # type: ignore[arg-type]  # the scripted reader needs no feed
            book=PositionBook(store.list_leases, refresh_s=1),
            observer_factory=lambda: observer,
            clock=clock,
            progress=HostProgress().leases,
            dead_letters=DeadLetterFolder(tmp_path) if tmp_path else None,
        ),
        WorkerPolicy(
            host=HostId("h1"),
            processor="p",
            timings=timings,
            reading=Reading(),
            delivery=DeliveryPolicy(
                ObserverChoice("recording"), on_observer_error=policy, attempts=1
            ),
        ),
        WorkerSignals(
            stop=asyncio.Event(),
            caught_up=asyncio.Event(),
            feed_changed=feed_changed,
            **({"drain": drain} if drain else {}),
        ),
    )
    held = HeldLease(lease, clock=clock, fence_after_s=timings.fence_after_s)
    reader = ScriptedReader(steps, position=at(0), before_read=before_read)
    worker = Worker(held, env, make_reader=lambda token, position: reader)
    return Running(asyncio.create_task(worker.run()), env, store, clock, reader)


async def until_caught_up(run: Running) -> CloseReason:
    assert run.env.signals.caught_up is not None
    await asyncio.wait_for(run.env.signals.caught_up.wait(), patience.left_s())
    run.env.signals.stop.set()
    return await asyncio.wait_for(run.task, patience.left_s())


async def test_batches_reach_the_observer_in_order_and_each_is_checkpointed() -> None:
    observer = RecordingObserver()
    run = await start(observer, batches(3, 2, 4))
    store = run.store
    assert await until_caught_up(run) is CloseReason.SHUTDOWN
    assert observer.seen == [["e0", "e1", "e2"], ["e3", "e4"], ["e5", "e6", "e7", "e8"]]
    assert observer.marks == [at(3), at(5), at(9)]
    assert store.written == [at(3), at(5), at(9), at(9)]  # the last one records "caught up"
    lease = await store.get(TOKEN)
    assert lease is not None and lease.owner is None  # released on shutdown, position kept
    assert lease.continuation == at(9).to_json() and lease.caught_up and lease.events == 9


async def test_a_dead_lettered_batch_is_written_aside_counted_once_and_passed(
    tmp_path: Path,
) -> None:
    observer = RecordingObserver(refuse=["e2"])
    run = await start(
        observer, batches(2, 2, 2), tmp_path=tmp_path, policy=OnObserverError.DEAD_LETTER
    )
    store = run.store
    await until_caught_up(run)
    assert observer.seen == [["e0", "e1"], ["e4", "e5"]]
    lease = await store.get(TOKEN)
    assert lease is not None and lease.dead_letters == 1 and lease.events == 4
    assert lease.continuation == at(6).to_json()
    letters = [p.read_text() for p in tmp_path.rglob("*") if p.is_file()]
    assert len(letters) == 1 and '"e2"' in letters[0] and '"e0"' not in letters[0]


async def test_a_lease_not_renewed_in_time_gives_the_observer_nothing_more() -> None:
    """Fencing: once the lease may have expired for other hosts, no batch reaches the observer
    and nothing more is checkpointed, even with the next batch already read."""
    observer = RecordingObserver()

    async def freeze_renewals(n: int) -> None:
        if n == 1:  # while the second batch is read, the lease goes unrenewed too long
            run.clock.now += 60

    run = await start(observer, batches(2, 2, 2), before_read=freeze_renewals)
    store = run.store
    assert await asyncio.wait_for(run.task, patience.left_s()) is CloseReason.LEASE_LOST
    assert observer.seen == [["e0", "e1"]]
    lease = await store.get(TOKEN)
    assert lease is not None and lease.owner == "h1"  # not released: it may be someone else's
    assert lease.continuation == at(2).to_json() and store.written == [at(2)]


async def test_a_hand_over_finishes_the_batch_in_hand_then_releases_to_the_taker() -> None:
    observer = RecordingObserver()

    async def another_host_asks(n: int) -> None:
        if n == 1:
            seen = await run.store.get(TOKEN)
            assert seen is not None and await run.store.request_handover(seen, HostId("h2"))

    run = await start(observer, batches(2, 2, 2), before_read=another_host_asks)
    store = run.store
    assert await asyncio.wait_for(run.task, patience.left_s()) is CloseReason.HANDED_OVER
    assert observer.seen == [["e0", "e1"], ["e2", "e3"]]  # the second batch was in hand
    lease = await store.get(TOKEN)
    assert lease is not None and lease.owner is None and lease.next_owner == "h2"
    assert lease.continuation == at(4).to_json()


async def test_a_lease_stopped_in_front_of_known_bad_data_parks_there() -> None:
    """The bytes in hand show a damaged block ahead (or the decoder got stuck on it and the
    host is leaving): stopping does not hand the lease on to meet it again, it parks."""
    observer = RecordingObserver()
    bad = UndecodableBlockError("log/00/x/00000.avro", 4, "undecodable block")

    async def host_stops(n: int) -> None:
        if n == 1:
            run.env.signals.stop.set()

    run = await start(observer, [*batches(2, 2), bad], before_read=host_stops)
    assert await asyncio.wait_for(run.task, patience.left_s()) is CloseReason.FEED_ERROR
    assert observer.seen == [["e0", "e1"], ["e2", "e3"]]
    lease = await run.store.get(TOKEN)
    assert lease is not None and lease.parked and lease.owner is None
    assert "log/00/x/00000.avro at byte 4" in lease.error
    assert lease.continuation == at(4).to_json()  # in front of the bad block


async def test_an_observer_that_checkpoints_itself_moves_the_lease_only_as_it_confirms() -> None:
    observer = RecordingObserver(auto_checkpoint=False)
    run = await start(observer, batches(2, 2, 2))
    store, env = run.store, run.env
    await asyncio.wait_for(
        run.reader.idle.wait(), patience.left_s()
    )  # all read; caught up, not confirmed
    assert observer.seen == [["e0", "e1"], ["e2", "e3"], ["e4", "e5"]]
    caught_up = env.signals.caught_up
    assert store.written == [] and caught_up is not None and not caught_up.is_set()
    assert observer.ctx is not None
    await observer.ctx.checkpoint(observer.marks[0])  # the first batch is durable
    await observer.ctx.checkpoint(observer.marks[0])  # again: nothing new, nothing written
    assert store.written == [at(2)]
    await observer.ctx.checkpoint()  # everything handed out is durable
    assert await until_caught_up(run) is CloseReason.SHUTDOWN
    assert store.written[:2] == [at(2), at(6)]
    lease = await store.get(TOKEN)
    assert lease is not None and lease.caught_up and lease.continuation == at(6).to_json()


class ChecksEverySecondBatch(RecordingObserver):
    """A plain observer that checkpoints itself from its thread, after every second batch."""

    def process_changes(self, ctx: PartitionContext, events: Sequence[ChangeEvent]) -> None:
        super().process_changes(ctx, events)
        if len(self.seen) % 2 == 0:
            ctx.checkpoint_blocking(ctx.mark())


async def test_a_plain_observer_checkpoints_itself_from_its_thread() -> None:
    observer = ChecksEverySecondBatch(auto_checkpoint=False)
    run = await start(observer, batches(2, 2, 2, 2, 2))
    await asyncio.wait_for(run.reader.idle.wait(), patience.left_s())
    assert run.store.written == [at(4), at(8)]  # written while the thread waited
    assert observer.ctx is not None
    with pytest.raises(RuntimeError, match="await checkpoint"):
        observer.ctx.checkpoint_blocking()  # on the event loop: would stop it
    run.env.signals.stop.set()
    assert await asyncio.wait_for(run.task, patience.left_s()) is CloseReason.SHUTDOWN
    lease = await run.store.get(TOKEN)
    assert lease is not None and lease.continuation == at(8).to_json()  # e8, e9 not confirmed


async def test_a_batch_filtered_to_nothing_still_moves_an_observer_checkpointing_itself() -> None:
    """The last batch of the shard holds only events the filter leaves out: the observer sees
    nothing and could never confirm it, yet the lease is checkpointed past it, caught up."""
    observer = RecordingObserver(auto_checkpoint=False)
    steps = [*batches(2), LeaseRead(Step.BATCH, at(5), fake_batch([]))]
    run = await start(observer, steps)
    await asyncio.wait_for(run.reader.idle.wait(), patience.left_s())
    assert observer.seen == [["e0", "e1"]]
    assert observer.ctx is not None
    await observer.ctx.checkpoint(observer.marks[0])  # the only real batch is durable
    assert await until_caught_up(run) is CloseReason.SHUTDOWN
    lease = await run.store.get(TOKEN)
    assert lease is not None and lease.caught_up and lease.continuation == at(5).to_json()


async def test_a_change_seen_while_the_worker_reads_still_wakes_it() -> None:
    """At a segment's end a caught-up worker waits for the feed watcher, which replaces its
    event at each change. The worker waits on the event it took before reading, so a change
    while it reads (or records "caught up") wakes it at once, not twelve polls later."""
    observer = RecordingObserver()
    current = [asyncio.Event()]
    woken = asyncio.Event()

    async def before_read(n: int) -> None:
        if n == 1:  # reading what turns out to be the end: a new segment is seen meanwhile
            current[0].set()
            current[0] = asyncio.Event()
        if n == 2:
            woken.set()

    end = replace(at(2), is_segment_done=True)
    run = await start(
        observer,
        [*batches(2), LeaseRead(Step.CAUGHT_UP, end)],
        before_read=before_read,
        feed_changed=lambda: current[0],
        poll_s=60,  # a missed change would leave it waiting twelve minutes
    )
    await asyncio.wait_for(woken.wait(), patience.left_s())
    run.env.signals.stop.set()
    await asyncio.wait_for(run.task, patience.left_s())


class HoldingObserver(RecordingObserver):
    """Says once what it holds already (`KnowsWhatItHolds`), or fails to say."""

    def __init__(self, through: str | None, *, fails: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.through, self.fails = through, fails
        self.asked: list[str] = []

    async def held_through(self, ctx: Any, first: str) -> str | None:
        self.asked.append(first)
        if self.fails:
            raise RuntimeError("the sink cannot be read")
        return self.through


async def test_what_the_observer_holds_already_is_left_out_and_checkpointed_past() -> None:
    """After a crash the checkpoint lags the sink: the next owner asks once, delivers only what
    lies above, and moves the lease past the rest as if delivered (even for an observer that
    confirms its own batches: it never sees the held ones to confirm)."""
    observer = HoldingObserver("e2", auto_checkpoint=False)
    run = await start(observer, batches(2, 2, 2))
    await asyncio.wait_for(run.reader.idle.wait(), patience.left_s())
    assert observer.asked == ["e0"]  # once, with the first position about to be delivered
    assert observer.seen == [["e3"], ["e4", "e5"]]
    assert run.store.written == [at(2)]  # the held batch, passed without the observer
    assert observer.ctx is not None
    await observer.ctx.checkpoint()
    assert await until_caught_up(run) is CloseReason.SHUTDOWN
    lease = await run.store.get(TOKEN)
    assert lease is not None and lease.continuation == at(6).to_json() and lease.events == 3


async def test_an_observer_that_cannot_say_what_it_holds_gets_every_event() -> None:
    observer = HoldingObserver("e5", fails=True)
    run = await start(observer, batches(2, 2))
    assert await until_caught_up(run) is CloseReason.SHUTDOWN
    assert observer.asked == ["e0"] and observer.seen == [["e0", "e1"], ["e2", "e3"]]


class NeverClosing(RecordingObserver):
    """Its close waits for writes that never finish (a Spark that does not answer)."""

    async def close(self, ctx: Any, reason: CloseReason) -> None:
        await asyncio.Event().wait()


async def test_a_stop_signal_waits_for_the_observers_close_only_as_long_as_the_drain_allows() -> (
    None
):
    """The close is left behind once the budget is spent: the lease is released all the same,
    at its last checkpoint, rather than held until the orchestrator's SIGKILL."""
    observer = NeverClosing(auto_checkpoint=False)
    drain = DrainBudget(0.05, time.monotonic)
    run = await start(observer, batches(2, 2), drain=drain)
    await asyncio.wait_for(run.reader.idle.wait(), patience.left_s())
    assert observer.ctx is not None
    await observer.ctx.checkpoint(observer.marks[0])  # the second batch is never confirmed
    drain.begin()
    run.env.signals.stop.set()
    assert await asyncio.wait_for(run.task, patience.left_s()) is CloseReason.SHUTDOWN
    assert drain.cut == ["lease 00"]
    lease = await run.store.get(TOKEN)
    assert lease is not None and lease.owner is None and lease.continuation == at(2).to_json()
