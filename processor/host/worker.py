"""One worker per owned lease: read its shard, hand batches to its observer, checkpoint.

`Worker.run` is the error boundary of a lease. It never raises (except cancellation): every way
it can end becomes one `CloseReason`, decided in one place, then the observer is closed and the
lease released when it is still ours. The checks before each batch are what make a lost lease
safe: the worker stops before the observer sees another batch once the lease is lost, handed
over, or not renewed within the fencing interval.

The read loop is here; handing a batch to the observer is `Delivery` (delivery.py), what may be
checkpointed is the pure `CheckpointLedger` (ledger.py), writing it is `Checkpointer`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from leases import LeaseError, LeaseMove
from observers import CloseReason, ObserverCalls, PartitionContext
from processor.changefeed.errors import (
    FeedCorrupt,
    FeedUnavailable,
    InvalidContinuation,
    MissingChunkError,
)
from processor.host.checkpointer import Checkpointer, after_batch
from processor.host.delivery import Delivery, check_still_ours
from processor.host.feed_watcher import WAKE_ANYWAY_POLLS
from processor.host.gaps import OnGap, position_after_gap
from processor.host.ledger import CheckpointLedger
from processor.host.owner_writes import HeldLease
from processor.host.worker_env import WorkerEnded, WorkerEnv
from processor.reading.lease_position import LeasePosition
from processor.reading.scan_stream import ScanReader
from processor.reading.shard_stream import LeaseReader, Reader, Step
from processor.waiting import wait_any

ReaderFactory = Callable[[str, LeasePosition], Reader]  # lease token, its position


class Worker:
    def __init__(
        self, held: HeldLease, env: WorkerEnv, *, make_reader: ReaderFactory | None = None
    ) -> None:
        self.held = held
        self.env = env
        self._make_reader = make_reader or self._reader  # the feed's, unless a test scripts one
        self.log = structlog.get_logger("cfp.worker").bind(
            host=env.host, lease=held.token, epoch=held.epoch
        )
        self.checkpoints: Checkpointer | None = None  # once the continuation is read
        self.delivery: Delivery | None = None

    async def run(self) -> CloseReason:
        held, env = self.held, self.env
        ctx = PartitionContext(
            lease_token=held.token,
            host_name=env.host,
            epoch=held.epoch,
            processor_name=env.processor,
            log=self.log,
            on_checkpoint=self._observer_checkpoint,
        )
        calls: ObserverCalls | None = None
        reason, error, park = CloseReason.SHUTDOWN, "", False
        try:
            position = LeasePosition.from_json(held.lease.continuation, lease=held.token)
            checkpoints = Checkpointer(held, env, CheckpointLedger.at(position), self.log)
            self.checkpoints = checkpoints
            reader = self._make_reader(held.token, position)
            try:
                calls = ObserverCalls(env.observer_factory(), spec=env.observer_spec)
                await calls.open(ctx)
            except Exception as e:
                raise WorkerEnded(CloseReason.OBSERVER_ERROR, f"observer open: {e!r}") from e
            self.delivery = Delivery(held, env, calls, ctx, self.log)
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

    def _reader(self, token: str, position: LeasePosition) -> Reader:
        env = self.env
        if position.scan is not None:
            return ScanReader(
                env.catalog.storage, position, batch_events=env.batch_events, change=env.change
            )
        return LeaseReader(
            env.catalog,
            shard=token,
            position=position,
            batch_events=env.batch_events,
            is_ordered=env.is_ordered,
            change=env.change,
        )

    async def _loop(
        self,
        reader: Reader,
        calls: ObserverCalls,
        delivery: Delivery,
        checkpoints: Checkpointer,
        ahead: asyncio.TaskGroup,
    ) -> None:
        held, env, ledger = self.held, self.env, checkpoints.ledger
        then = after_batch(calls, checkpoints)
        while True:
            # bad data known to lie ahead in the bytes in hand: stopping or handed over, the
            # lease reads on to park in front of it (its next owner would only meet it again)
            if reader.bad_data_ahead() is None or not env.running.is_set():
                check_still_ours(held, env)
            elif not held.is_usable():
                raise WorkerEnded(CloseReason.LEASE_LOST)
            if not env.running.is_set():  # paused: hold the lease idle, everything confirmed
                env.progress.waiting(held.token)
                await checkpoints.confirm_delivered()
                await wait_any(
                    env.stop, held.lost, held.handover, env.running, timeout_s=env.timings.poll_s
                )
                continue
            # taken before reading: a change the watcher sees while we read or checkpoint
            # still wakes us (a fresh event taken after could miss it)
            news = env.feed_changed() if env.feed_changed is not None else None
            try:
                step = await reader.read(may_enter=env.book.may_enter, read_ahead=ahead)
            except FeedUnavailable as e:
                self.log.warning("worker.feed_unavailable", error=str(e))
                reader.reset()
                await wait_any(env.stop, held.lost, held.handover, timeout_s=env.timings.poll_s)
                continue
            except MissingChunkError as e:
                if env.on_gap is OnGap.STOP:
                    raise  # parked in front of the gap, like other bad data
                await self._step_over_gap(reader, e, checkpoints)
                continue
            if step.step is Step.BATCH and not (step.batch and len(step.batch)):
                # every event filtered out: nothing for the observer, and nothing it could
                # confirm (one that checkpoints itself would never), so a step without a batch
                ledger.advanced(step.position)
                await checkpoints.confirm_delivered()
            elif step.step is Step.BATCH:
                assert step.batch is not None
                accepted = await delivery.deliver(step.batch, ledger.delivered, step.position)
                if accepted is None:  # dead-lettered: checkpointed once the batches before are
                    ledger.dead_lettered(step.position)
                    await checkpoints.confirm_delivered()
                    continue
                ledger.accepted(
                    step.position,
                    events=accepted.events,
                    event_bytes=accepted.event_bytes,
                    last=accepted.last_event_time,
                )
                await then(step.position)
            elif step.step is Step.ADVANCED:
                ledger.advanced(step.position)
                await checkpoints.confirm_delivered()
            elif step.step is Step.CAUGHT_UP:
                await self._caught_up(step.position, checkpoints, news)
            else:  # at the barrier: others wait for our position too
                env.progress.waiting(held.token)
                await checkpoints.confirm_delivered()
                await env.book.wait_for_change(
                    stop=env.stop, timeout_s=env.timings.barrier_refresh_s
                )

    async def _caught_up(
        self, position: LeasePosition, checkpoints: Checkpointer, news: asyncio.Event | None
    ) -> None:
        """Record "caught up" (and "finished", at an end time or a scan's end) once every batch
        is confirmed, then wait for news: the host's feed watcher (`news`, taken before the
        read) at a segment's end, the shard itself inside a segment still being written."""
        held, env, ledger = self.held, self.env, checkpoints.ledger
        checkpoints.confirmed.clear()
        finished = position.is_finished
        recorded = checkpoints.is_caught_up_recorded and (
            checkpoints.is_finished_recorded or not finished
        )
        if not recorded and ledger.all_confirmed():
            await checkpoints.write(position, caught_up=True)
        elif recorded and ledger.all_confirmed():
            env.progress.caught_up(held.token)  # as the lease already said when we took it
        if checkpoints.is_finished_recorded:
            raise WorkerEnded(CloseReason.FINISHED)  # released; no host takes it again
        # an observer still writing: record "caught up" as soon as it confirms
        confirming = [] if ledger.all_confirmed() else [checkpoints.confirmed]
        at_edge = position.segment is None or position.is_segment_done
        if at_edge and news is not None:
            wake, wait_s = [news], env.timings.poll_s * WAKE_ANYWAY_POLLS
        else:
            wake, wait_s = [], env.timings.poll_s
        await wait_any(env.stop, held.lost, held.handover, *confirming, *wake, timeout_s=wait_s)

    async def _step_over_gap(
        self, reader: Reader, error: MissingChunkError, checkpoints: Checkpointer
    ) -> None:
        """Data at the lease's position was deleted (retention): record the gap in the lease and
        continue from the earliest data still present. Checkpointed only once every batch before
        it is confirmed, so nothing delivered before the gap is skipped with it."""
        env, held, ledger = self.env, self.held, checkpoints.ledger
        before = reader.position
        after = await position_after_gap(env.catalog, held.token, before, error)
        if not before.is_before(after):
            raise error  # nowhere to go: park rather than loop
        while not ledger.all_confirmed():
            check_still_ours(held, env)
            checkpoints.confirmed.clear()
            await wait_any(
                checkpoints.confirmed,
                env.stop,
                held.lost,
                held.handover,
                timeout_s=env.timings.poll_s,
            )
        gap = LeaseMove(
            at=env.clock.wall(),
            before=before.to_json(),
            after=after.to_json(),
            skipped_bytes=None,  # the data is gone: its size is unknown
            reason="retention gap",
            error=str(error),
        )
        self.log.error("lease.gap", missing=error.path, before=gap.before, after=gap.after)
        env.progress.gaps.inc()
        ledger.advanced(after)
        await checkpoints.write(after, caught_up=False, gap=gap)
        reader.position = after
        reader.reset()

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
            try:
                await asyncio.shield(calls.close(ctx, reason))
            except Exception:
                log.exception("observer.close_failed")
        if reason is not CloseReason.LEASE_LOST and not self.held.is_lost:
            try:
                async with asyncio.timeout(self.env.timings.request_timeout_s * 3):
                    await asyncio.shield(
                        self.held.write(
                            lambda lease: (
                                self.env.store.park(lease, error=error)
                                if park
                                else self.env.store.release(lease, error=error)
                            )
                        )
                    )
            except (LeaseError, TimeoutError) as e:
                log.warning("lease.release_failed", error=str(e))
        level: Any = log.error if error else log.info
        level(
            "worker.parked" if park else "worker.stopped",
            error=error or None,
            batches=self.delivery.batches if self.delivery else 0,
            events=self.delivery.events if self.delivery else 0,
        )


async def run_worker(
    held: HeldLease, env: WorkerEnv, *, make_reader: ReaderFactory | None = None
) -> CloseReason:
    env.progress.started(held.token, held.epoch, held.lease.continuation)
    reason = CloseReason.FEED_ERROR
    try:
        reason = await Worker(held, env, make_reader=make_reader).run()
        return reason
    finally:
        env.progress.ended(held.token, reason)
