"""One worker per owned lease: read its shard, hand batches to its observer, checkpoint.

`Worker.run` is the error boundary of a lease. It never raises (except cancellation): every way
it can end becomes one `CloseReason`, decided in one place, then the observer is closed and the
lease released when it is still ours. The checks before each batch are what make a lost lease
safe: the worker stops before the observer sees another batch once the lease is lost, handed
over, or not renewed within the fencing interval.

The read loop is here; handing a batch to the observer is `Delivery` (delivery.py), what may be
checkpointed is the pure `CheckpointLedger` (checkpoint_ledger.py), writing it is `Checkpointer`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from leases import LeaseError, LeaseTable
from observers import CloseReason, PartitionContext
from observers.host_side import host_context
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.errors import (
    FeedCorrupt,
    FeedUnavailable,
    InvalidContinuation,
    MissingChunkError,
)
from processor.host.host_config import Reading
from processor.host.leasing.held_lease import HeldLease
from processor.host.leasing.release import let_go
from processor.host.running.drain_budget import DrainBudget
from processor.host.worker.checkpoint_ledger import CheckpointLedger
from processor.host.worker.checkpointer import Checkpointer, after_batch, checkpointer_for
from processor.host.worker.delivery import (
    Delivery,
    NotDelivered,
    check_still_ours,
    delivery_for,
)
from processor.host.worker.feed_watcher import WAKE_ANYWAY_POLLS
from processor.host.worker.gap_step import step_over_gap
from processor.host.worker.worker_env import WorkerEnded, WorkerEnv
from processor.plugins.observer_calls import ObserverCalls
from processor.reading.lease_position import LeasePosition
from processor.reading.lease_reader import LeaseRead, LeaseReader, Reader, Step
from processor.reading.retention_gaps import OnGap
from processor.reading.scan_reader import ScanReader
from processor.waiting import wait_any

ReaderFactory = Callable[[str, LeasePosition], Reader]  # lease token, its position


class Worker:
    def __init__(
        self, held: HeldLease, env: WorkerEnv, *, make_reader: ReaderFactory | None = None
    ) -> None:
        self.held = held
        self.env = env
        deps, policy = env.deps, env.policy
        self._progress, self._book, self._signals = deps.progress, deps.book, env.signals
        self._timings, self._reading = policy.timings, policy.reading
        # the feed's, unless a test scripts one
        self._make_reader = make_reader or feed_reader(deps.catalog, policy.reading)
        self.log = structlog.get_logger("cfp.worker").bind(
            host=policy.host, lease=held.token, epoch=held.epoch
        )
        self.checkpoints: Checkpointer | None = None  # once the continuation is read
        self.delivery: Delivery | None = None

    async def run(self) -> CloseReason:
        held, env = self.held, self.env
        ctx = host_context(
            lease_token=held.token,
            host_name=env.policy.host,
            epoch=held.epoch,
            processor_name=env.policy.processor,
            log=self.log,
            on_checkpoint=self._observer_checkpoint,
            loop=asyncio.get_running_loop(),
        )
        calls: ObserverCalls | None = None
        reason, error, park = CloseReason.SHUTDOWN, "", False
        try:
            position = LeasePosition.from_json(held.lease.continuation, lease=held.token)
            checkpoints = checkpointer_for(held, env, CheckpointLedger.at(position), self.log)
            self.checkpoints = checkpoints
            reader = self._make_reader(held.token, position)
            try:
                calls = env.new_observer()
                await calls.open(ctx)
            except Exception as e:
                raise WorkerEnded(CloseReason.OBSERVER_ERROR, f"observer open: {e!r}") from e
            self.delivery = delivery_for(held, env, calls, ctx, self.log)
            self.log.info("worker.started", position=position.to_json())
            failure: Exception | None = None
            async with asyncio.TaskGroup() as ahead:  # read-ahead GETs live no longer than this
                try:
                    await self._loop(reader, calls, self.delivery, checkpoints, ahead)
                except Exception as e:  # raised past the group, not wrapped into an ExceptionGroup
                    failure = e
                finally:
                    reader.reset()
            if failure is not None:
                raise failure
        except WorkerEnded as end:
            reason, error, park = end.reason, end.error, end.park
        except (FeedCorrupt, InvalidContinuation) as e:
            # bytes that will not change: stop in front of them until an operator acts
            reason, error, park = CloseReason.FEED_ERROR, str(e), True
        except Exception as e:  # the boundary: a bug must not take the host down
            self.log.exception("worker.crashed")
            reason, error = CloseReason.FEED_ERROR, f"{type(e).__name__}: {e}"
        finally:
            await self._finish(calls, ctx, reason, error, park=park)
        return reason

    async def _observer_checkpoint(self, mark: object | None) -> None:
        assert self.checkpoints is not None, "made before the observer opens"
        await self.checkpoints.for_observer(mark)

    async def _loop(
        self,
        reader: Reader,
        calls: ObserverCalls,
        delivery: Delivery,
        checkpoints: Checkpointer,
        ahead: asyncio.TaskGroup,
    ) -> None:
        then = after_batch(calls, checkpoints)
        feed_changed = self.env.signals.feed_changed
        while True:
            if not await self._may_read(reader, checkpoints):
                continue
            # taken before reading: a change the watcher sees while we read or checkpoint
            # still wakes us (a fresh event taken after could miss it)
            news = feed_changed() if feed_changed is not None else None
            step = await self._read(reader, checkpoints, ahead)
            if step is not None:
                await self._take(step, delivery, checkpoints, then, news)

    async def _may_read(self, reader: Reader, checkpoints: Checkpointer) -> bool:
        """Whether to read on: the lease is still ours, and the processor is not paused (held
        idle then, everything confirmed; False after a wait)."""
        held, signals = self.held, self._signals
        running = signals.running
        # bad data known to lie ahead in the bytes in hand: stopping or handed over, the
        # lease reads on to park in front of it (its next owner would only meet it again)
        if reader.bad_data_ahead() is None or not running.is_set():
            check_still_ours(held, signals.stop)
        elif not held.is_usable():
            raise WorkerEnded(CloseReason.LEASE_LOST)
        if running.is_set():
            return True
        self._progress.waiting(held.token)
        await checkpoints.confirm_delivered()
        await self._wait(running, timeout_s=self._timings.poll_s)
        return False

    async def _read(
        self, reader: Reader, checkpoints: Checkpointer, ahead: asyncio.TaskGroup
    ) -> LeaseRead | None:
        """The next step of the lease's reader; None after a feed that did not answer (waited
        out) or a retention gap (stepped over, with `--on-gap skip`)."""
        try:
            return await reader.read(may_enter=self._book.may_enter, read_ahead=ahead)
        except FeedUnavailable as e:
            self.log.warning("worker.feed_unavailable", error=str(e))
            reader.reset()
            await self._wait(timeout_s=self._timings.poll_s)
        except MissingChunkError as e:
            if self._reading.on_gap is OnGap.STOP:
                raise  # parked in front of the gap, like other bad data
            deps = self.env.deps
            await step_over_gap(
                reader,
                e,
                catalog=deps.catalog,
                checkpoints=checkpoints,
                progress=deps.progress,
                wall=deps.clock.wall,
            )
        return None

    async def _take(
        self,
        step: LeaseRead,
        delivery: Delivery,
        checkpoints: Checkpointer,
        then: Callable[[LeasePosition], Awaitable[None]],
        news: asyncio.Event | None,
    ) -> None:
        """Act on one step: deliver a batch, move past what holds none, record caught up, or
        wait at the segment barrier."""
        ledger = checkpoints.ledger
        if step.step is Step.BATCH and step.batch is not None and len(step.batch):
            accepted = await delivery.deliver(step.batch, ledger.delivered, step.position)
            if accepted is NotDelivered.DEAD_LETTERED:  # checkpointed once those before are
                ledger.dead_lettered(step.position)
                await checkpoints.confirm_delivered()
                return
            if accepted is NotDelivered.HELD_ALREADY:  # the observer holds them: as filtered out
                ledger.advanced(step.position)
                await checkpoints.confirm_delivered()
                return
            ledger.accepted(
                step.position,
                events=accepted.events,
                event_bytes=accepted.event_bytes,
                last=accepted.last_event_time,
            )
            await then(step.position)
        elif step.step in (Step.BATCH, Step.ADVANCED):
            # a batch whose every event was filtered out gives nothing the observer could
            # confirm (one that checkpoints itself would never): a step without a batch
            ledger.advanced(step.position)
            await checkpoints.confirm_delivered()
        elif step.step is Step.CAUGHT_UP:
            await self._caught_up(step.position, checkpoints, news)
        else:  # at the barrier: others wait for our position too
            self._progress.waiting(self.held.token)
            await checkpoints.confirm_delivered()
            await self._book.wait_for_change(
                stop=self._signals.stop, timeout_s=self._timings.barrier_refresh_s
            )

    async def _caught_up(
        self, position: LeasePosition, checkpoints: Checkpointer, news: asyncio.Event | None
    ) -> None:
        """Record "caught up" (and "finished"), then wait for news: the host's feed watcher
        (`news`, taken before the read) at a segment's end, the shard itself inside a segment
        still being written, or an observer still writing confirming its batches."""
        if await checkpoints.caught_up(position):
            raise WorkerEnded(CloseReason.FINISHED)  # released; no host takes it again
        poll_s = self._timings.poll_s
        at_edge = position.segment is None or position.is_segment_done
        if at_edge and news is not None:
            wake, wait_s = [news], poll_s * WAKE_ANYWAY_POLLS
        else:
            wake, wait_s = [], poll_s
        await self._wait(*checkpoints.unconfirmed(), *wake, timeout_s=wait_s)

    async def _wait(self, *also: asyncio.Event, timeout_s: float) -> None:
        """Wait until the host stops, the lease is lost or handed over, one of `also` is set,
        or `timeout_s` passes."""
        held = self.held
        await wait_any(self._signals.stop, held.lost, held.handover, *also, timeout_s=timeout_s)

    async def _finish(
        self,
        calls: ObserverCalls | None,
        ctx: PartitionContext,
        reason: CloseReason,
        error: str,
        *,
        park: bool,
    ) -> None:
        """Close the observer, then release (or park) the lease if it is still ours, with the
        continuation kept."""
        log = self.log.bind(reason=reason.value)
        if calls is not None:
            await _close_observer(calls, ctx, reason, self._signals.drain, log)
        if reason is not CloseReason.LEASE_LOST and not self.held.is_lost:
            store, timeout_s = self.env.deps.store, self._timings.request_timeout_s * 3
            await _let_go(self.held, store, timeout_s, error=error, park=park, log=log)
        level: Any = log.error if error else log.info
        level("worker.parked" if park else "worker.stopped", error=error or None, **_totals(self))


def _totals(worker: Worker) -> dict[str, int]:
    """What the worker's observer took, for its last log line."""
    done = worker.delivery
    if done is None:
        return {"batches": 0, "events": 0, "held_already": 0}
    return {"batches": done.batches, "events": done.events, "held_already": done.held_events}


async def _close_observer(
    calls: ObserverCalls, ctx: PartitionContext, reason: CloseReason, drain: DrainBudget, log: Any
) -> None:
    """Close the observer within what is left of the drain's budget; a close that takes longer
    is left to finish on its own (its end is still logged)."""
    closing = asyncio.ensure_future(calls.close(ctx, reason))
    try:  # shielded: a worker cancelled still closes
        await drain.within(f"lease {ctx.lease_token}", asyncio.shield(closing))
    except Exception:
        log.exception("observer.close_failed")
    if not closing.done():
        log.warning("observer.close_cut", seconds=drain.seconds)
        closing.add_done_callback(_log_late_close(log))


def _log_late_close(log: Any) -> Callable[[asyncio.Future[None]], None]:
    def done(closing: asyncio.Future[None]) -> None:
        error = None if closing.cancelled() else closing.exception()
        log.info("observer.closed_late", error=repr(error) if error else None)

    return done


def feed_reader(catalog: FeedCatalog, reading: Reading) -> ReaderFactory:
    """A lease's reader: of its shard, or of its part of an initial scan."""

    def make(token: str, position: LeasePosition) -> Reader:
        if position.scan is not None:
            return ScanReader(
                catalog.storage,
                position,
                batch_events=reading.batch_events,
                change=reading.change,
            )
        return LeaseReader(
            catalog,
            shard=token,
            position=position,
            batch_events=reading.batch_events,
            is_ordered=reading.is_ordered,
            change=reading.change,
        )

    return make


async def _let_go(
    held: HeldLease, store: LeaseTable, timeout_s: float, *, error: str, park: bool, log: Any
) -> None:
    """Release the lease (or park it) with its continuation kept; a store that refuses or does
    not answer within `timeout_s` leaves it to expire."""
    try:
        await let_go(held, store, timeout_s=timeout_s, error=error, park=park)
    except (LeaseError, TimeoutError) as e:
        log.warning("lease.release_failed", error=str(e))


async def run_worker(
    held: HeldLease, env: WorkerEnv, *, make_reader: ReaderFactory | None = None
) -> CloseReason:
    progress = env.deps.progress
    progress.started(held.token, held.epoch, held.lease.continuation)
    reason = CloseReason.FEED_ERROR
    try:
        reason = await Worker(held, env, make_reader=make_reader).run()
        return reason
    finally:
        progress.ended(held.token, reason)
