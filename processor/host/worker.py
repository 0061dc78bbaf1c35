"""One worker per owned lease: read its shard, hand batches to its observer, checkpoint.

`run_worker` is the error boundary of a lease. It never raises (except cancellation): every way
it can end becomes one `CloseReason`, decided in one place, then the observer is closed and the
lease released when it is still ours. The checks before each batch are what make a lost lease
safe: the worker stops before the observer sees another batch once the lease is lost, handed
over, or not renewed within the fencing interval.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    wait_random_exponential,
)

from leases import Delivered, HostId, LeaseError, LeaseMove, LeaseStore
from observers import (
    CloseReason,
    EventBatch,
    LeaseLostError,
    ObserverCalls,
    ObserverFactory,
    PartitionContext,
    ReplayRequired,
)
from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.errors import (
    FeedCorrupt,
    FeedUnavailable,
    InvalidContinuation,
    MissingChunkError,
)
from processor.changefeed.selection import parse_event_time
from processor.clock import Clock
from processor.host.dead_letter import DeadLetterFolder, OnObserverError
from processor.host.gaps import OnGap, position_after_gap
from processor.host.owner_writes import HeldLease
from processor.host.progress import HostProgress
from processor.host.timings import Timings
from processor.reading.barrier_book import PositionBook
from processor.reading.lease_position import LeasePosition
from processor.reading.scan_stream import ScanReader
from processor.reading.shard_stream import Batch, LeaseReader, Reader, Step
from processor.waiting import running_event, wait_any

OBSERVER_ATTEMPTS = 5  # the default of --observer-attempts


@dataclass(frozen=True, slots=True)
class WorkerEnv:
    """What every worker of a host shares."""

    store: LeaseStore
    catalog: FeedCatalog
    book: PositionBook
    observer_factory: ObserverFactory
    host: HostId
    processor: str
    timings: Timings
    clock: Clock
    stop: asyncio.Event  # the host is draining
    batch_events: int = 250
    is_ordered: bool = True
    observer_attempts: int = OBSERVER_ATTEMPTS
    observer_spec: str = ""
    caught_up: asyncio.Event | None = None  # set when a lease records it is caught up
    on_observer_error: OnObserverError = OnObserverError.RETRY
    dead_letters: DeadLetterFolder | None = None  # with OnObserverError.DEAD_LETTER
    on_gap: OnGap = OnGap.SKIP  # data at a lease's position deleted (retention)
    progress: HostProgress = field(default_factory=HostProgress)  # for /status and /metrics
    running: asyncio.Event = field(default_factory=running_event)  # cleared: processor paused


class _Ended(Exception):
    """How a worker ends. `park`: the cause will not go away by retrying (bad data, a poison
    batch with `stop`), so the lease is parked instead of released."""

    def __init__(self, reason: CloseReason, error: str = "", *, park: bool = False) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.error = error
        self.park = park


class Worker:
    def __init__(self, held: HeldLease, env: WorkerEnv) -> None:
        self.held = held
        self.env = env
        self.log = structlog.get_logger("cfp.worker").bind(
            host=env.host, lease=held.token, epoch=held.epoch
        )
        self.checkpointed = LeasePosition()
        self.delivered = LeasePosition()
        self.batch_end = LeasePosition()  # after the last batch handed to the observer
        self.is_caught_up_recorded = held.lease.caught_up
        self.batches = 0
        self.events = 0
        self._dead_ends: list[LeasePosition] = []  # dead letters not yet counted in the lease
        self._delivered = Delivered()  # since the last checkpoint, for the lease's counters
        self._confirmed = asyncio.Event()  # the observer checkpointed a mark

    async def run(self) -> CloseReason:
        held, env = self.held, self.env
        ctx = PartitionContext(
            lease_token=held.token,
            host_name=env.host,
            epoch=held.epoch,
            processor_name=env.processor,
            log=self.log,
            _checkpoint=self._manual_checkpoint,
        )
        calls: ObserverCalls | None = None
        reason, error, park = CloseReason.SHUTDOWN, "", False
        try:
            position = LeasePosition.from_json(held.lease.continuation, lease=held.token)
            self.checkpointed = self.delivered = self.batch_end = position
            reader: Reader = (
                ScanReader(env.catalog.storage, position, batch_events=env.batch_events)
                if position.scan is not None
                else LeaseReader(
                    env.catalog,
                    shard=held.token,
                    position=position,
                    batch_events=env.batch_events,
                    is_ordered=env.is_ordered,
                )
            )
            try:
                calls = ObserverCalls(env.observer_factory(), spec=env.observer_spec)
                await calls.open(ctx)
            except Exception as e:
                raise _Ended(CloseReason.OBSERVER_ERROR, f"observer open: {e!r}") from e
            self.log.info("worker.started", position=position.to_json())
            failure: Exception | None = None
            async with asyncio.TaskGroup() as ahead:  # read-ahead GETs live no longer than this
                try:
                    await self._loop(reader, calls, ctx, ahead)
                except Exception as e:  # raised past the group, not wrapped into an ExceptionGroup
                    failure = e
                finally:
                    reader.reset()
            if failure is not None:
                raise failure
        except _Ended as end:
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

    async def _loop(
        self,
        reader: Reader,
        calls: ObserverCalls,
        ctx: PartitionContext,
        ahead: asyncio.TaskGroup,
    ) -> None:
        held, env = self.held, self.env
        while True:
            self._check_still_ours()
            if not env.running.is_set():  # paused: hold the lease idle, everything confirmed
                await self._confirm_delivered()
                await wait_any(
                    env.stop, held.lost, held.handover, env.running, timeout_s=env.timings.poll_s
                )
                continue
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
                await self._step_over_gap(reader, e)
                continue
            if step.step is Step.BATCH:
                assert step.batch is not None
                ctx._mark = step.position
                try:
                    accepted = await self._deliver(step.batch, calls, ctx, step.position)
                finally:
                    ctx._mark = None
                self.delivered = step.position
                if not accepted:  # dead-lettered: checkpointed once the batches before are
                    await self._confirm_delivered()
                    continue
                self.batch_end = step.position
                if calls.auto_checkpoint:
                    await self._checkpoint(step.position, caught_up=False)
            elif step.step is Step.ADVANCED:
                self.delivered = step.position
                await self._confirm_delivered()
            elif step.step is Step.CAUGHT_UP:
                self._confirmed.clear()
                if not self.is_caught_up_recorded and self._all_confirmed():
                    await self._checkpoint(step.position, caught_up=True)
                scan = step.position.scan
                if scan is not None and scan.done and self.is_caught_up_recorded:
                    raise _Ended(CloseReason.FINISHED)  # released; no host takes it again
                # an observer still writing: record "caught up" as soon as it confirms
                confirming = [] if self._all_confirmed() else [self._confirmed]
                await wait_any(
                    env.stop, held.lost, held.handover, *confirming, timeout_s=env.timings.poll_s
                )
            else:  # at the barrier: others wait for our position too
                await self._confirm_delivered()
                await env.book.wait_for_change(
                    stop=env.stop, timeout_s=env.timings.barrier_refresh_s
                )

    def _check_still_ours(self) -> None:
        if self.env.stop.is_set():
            raise _Ended(CloseReason.SHUTDOWN)
        if not self.held.is_usable():
            raise _Ended(CloseReason.LEASE_LOST)
        if self.held.handover.is_set():
            raise _Ended(CloseReason.HANDED_OVER)

    async def _deliver(
        self, batch: Batch, calls: ObserverCalls, ctx: PartitionContext, end: LeasePosition
    ) -> bool:
        """Hand one batch to the observer, retrying failures as `--on-observer-error` says.
        True when the observer accepted it, False when it was dead-lettered instead."""
        events = EventBatch(
            batch.records,
            batch.event_keys(),
            shard=self.held.token,
            segment=batch.segment,
            stream_name=self.env.processor,
            read_timestamp=self.env.clock.wall(),
        )
        if not events:
            return True
        held, env = self.held, self.env
        checked_at = env.clock.monotonic()
        if not held.is_usable():  # fencing: the last check before user code sees events
            raise _Ended(CloseReason.LEASE_LOST)
        # when it was last known to be ours (CLOCK_MONOTONIC: comparable across processes)
        self.log.debug("batch.delivering", events=len(events), mono=checked_at)
        attempts = 0 if env.on_observer_error is OnObserverError.RETRY else env.observer_attempts

        def give_up(state: RetryCallState) -> bool:
            return (
                bool(attempts and state.attempt_number >= attempts)
                or isinstance(state.outcome and state.outcome.exception(), ReplayRequired)
                or not held.is_usable()
                or env.stop.is_set()
                or held.handover.is_set()
            )

        def log_retry(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            self.log.warning("observer.retry", attempt=state.attempt_number, error=repr(error))

        async def pause(seconds: float) -> None:  # a backoff the host's stop cuts short
            await wait_any(env.stop, held.lost, held.handover, timeout_s=seconds)

        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(Exception),
                stop=give_up,
                wait=wait_random_exponential(multiplier=0.2, max=30.0),
                sleep=pause,
                before_sleep=log_retry,
                reraise=True,
            ):
                with attempt:
                    await calls.process_changes(ctx, events, still_ours=held.is_fresh)
        except Exception as e:
            self._check_still_ours()  # lost, handed over or stopping: the batch comes again
            error = f"process_changes: {e!r}"
            if isinstance(e, ReplayRequired):  # the observer lost batches it had accepted
                raise _Ended(CloseReason.OBSERVER_ERROR, error) from e
            where = f"batch {self.delivered.to_json()} to {end.to_json()}"
            if env.on_observer_error is OnObserverError.STOP:
                raise _Ended(CloseReason.OBSERVER_ERROR, f"{error} on {where}", park=True) from e
            await self._dead_letter(batch, end, error)
            return False
        self.batches += 1
        self.events += len(events)
        last_time = _event_time(batch.records[-1])
        env.progress.delivered(
            held.token, events=len(events), read_bytes=batch.read_bytes, last_event_time=last_time
        )
        d = self._delivered
        self._delivered = Delivered(
            d.events + len(events), d.event_bytes + batch.read_bytes, last_time or d.last_event_time
        )
        return True

    async def _dead_letter(self, batch: Batch, end: LeasePosition, error: str) -> None:
        env, held = self.env, self.held
        assert env.dead_letters is not None, "dead-letter needs a folder"
        try:
            path = await asyncio.to_thread(
                env.dead_letters.write,
                processor=env.processor,
                lease=held.token,
                epoch=held.epoch,
                host=env.host,
                start=self.delivered.to_json(),
                end=end.to_json(),
                error=error,
                at=env.clock.wall(),
                records=batch.records,
            )
        except OSError as e:
            raise _Ended(CloseReason.OBSERVER_ERROR, f"{error}; dead letter: {e}") from e
        self._dead_ends.append(end)
        env.progress.dead_letters.inc()
        self.log.error(
            "batch.dead_lettered", events=len(batch.records), path=str(path), error=error
        )

    async def _step_over_gap(self, reader: Reader, error: MissingChunkError) -> None:
        """Data at the lease's position was deleted (retention): record the gap in the lease and
        continue from the earliest data still present. Checkpointed only once every batch before
        it is confirmed, so nothing delivered before the gap is skipped with it."""
        env, held = self.env, self.held
        before = reader.position
        after = await position_after_gap(env.catalog, held.token, before, error)
        if not before.is_before(after):
            raise error  # nowhere to go: park rather than loop
        while not self._all_confirmed():
            self._check_still_ours()
            self._confirmed.clear()
            await wait_any(
                self._confirmed, env.stop, held.lost, held.handover, timeout_s=env.timings.poll_s
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
        self.delivered = after
        await self._checkpoint(after, caught_up=False, gap=gap)
        reader.position = after
        reader.reset()

    async def _checkpoint(
        self, position: LeasePosition, *, caught_up: bool, gap: LeaseMove | None = None
    ) -> None:
        """Write `position` into the lease, conditional on our owner and epoch.

        Errors: `_Ended(LEASE_LOST)` when the store refuses (another epoch owns it) or when the
        store stays unreachable until the fencing interval runs out.
        """
        if position.is_before(self.checkpointed):
            raise AssertionError(f"checkpoint would move back: {position} < {self.checkpointed}")
        text = position.to_json()
        env, held = self.env, self.held
        passed = sum(1 for dead in self._dead_ends if not position.is_before(dead))
        started = env.clock.monotonic()
        delivered = self._delivered
        while True:
            if not held.is_usable():
                raise _Ended(CloseReason.LEASE_LOST)
            try:
                result = await held.write(
                    lambda lease: env.store.checkpoint(
                        lease,
                        text,
                        caught_up=caught_up,
                        when=env.clock.wall(),
                        dead_letters=passed,
                        delivered=delivered,
                        gap=gap,
                    )
                )
            except LeaseError as e:
                self.log.warning("checkpoint.failed", error=str(e))
                await wait_any(held.lost, timeout_s=env.timings.renew_every_s / 2)
                continue
            if result is None:
                raise _Ended(CloseReason.LEASE_LOST)
            break
        self._delivered = Delivered(
            self._delivered.events - delivered.events,
            self._delivered.event_bytes - delivered.event_bytes,
            None if self._delivered is delivered else self._delivered.last_event_time,
        )
        env.progress.checkpointed(
            held.token, text, caught_up=caught_up, seconds=env.clock.monotonic() - started
        )
        self.checkpointed = position
        self._dead_ends = [dead for dead in self._dead_ends if position.is_before(dead)]
        self.is_caught_up_recorded = caught_up
        env.book.set(held.token, position)
        if caught_up and env.caught_up is not None:
            env.caught_up.set()

    async def _confirm_delivered(self) -> None:
        """Checkpoint a position reached without a batch (the end of a chunk or segment) once
        every batch before it is confirmed; an observer that buffers confirms later, so this
        is tried again at each step."""
        if self._all_confirmed() and self.checkpointed.is_before(self.delivered):
            await self._checkpoint(self.delivered, caught_up=False)

    def _all_confirmed(self) -> bool:
        """Every batch handed to the observer is checkpointed (an observer may lag behind)."""
        return not self.checkpointed.is_before(self.batch_end)

    async def _manual_checkpoint(self, mark: object | None) -> None:
        if mark is None:
            position = self.delivered
        elif isinstance(mark, LeasePosition):
            position = mark
        else:
            raise TypeError(f"checkpoint(mark): not a mark from ctx.mark(): {mark!r}")
        if not self.checkpointed.is_before(position):
            return  # never back, and nothing new
        try:
            await self._checkpoint(position, caught_up=False)
        except _Ended:
            raise LeaseLostError(self.held.token, self.held.epoch) from None
        self._confirmed.set()

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
            batches=self.batches,
            events=self.events,
        )


def _event_time(record: object) -> datetime | None:
    raw = record.get("eventTime") if isinstance(record, dict) else None
    try:
        return parse_event_time(raw) if isinstance(raw, str) else None
    except ValueError:
        return None


async def run_worker(held: HeldLease, env: WorkerEnv) -> CloseReason:
    env.progress.started(held.token, held.epoch, held.lease.continuation)
    reason = CloseReason.FEED_ERROR
    try:
        reason = await Worker(held, env).run()
        return reason
    finally:
        env.progress.ended(held.token, reason)
