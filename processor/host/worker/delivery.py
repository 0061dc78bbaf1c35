"""Handing one batch to a lease's observer, and what happens when the observer fails it.

`--on-observer-error` decides: `retry` (the default) retries with backoff for as long as the lease
is ours; `stop` parks the lease after `--observer-attempts`; `dead-letter` writes the batch to
the dead-letter folder after as many attempts and goes on. Whatever the policy, a lease lost,
handed over or stopping ends the retries: the batch is then delivered again by the next owner.
An observer that raises `ReplayRequired` lost batches it had accepted: its lease is released so
that they come again from the checkpoint. One that raises `Unavailable` cannot reach where it
writes (the Spark observer's server lost): the batch is offered again every `retry_after_s`,
not counted as a failure (the host reports the outage itself), for as long as the lease is ours.
An observer that knows what it holds (`KnowsWhatItHolds`) is asked once, before the lease's first
batch; what it holds already is left out (the checkpoint lags a sink that wrote and then lost its
host).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    wait_random_exponential,
)

from leases import Delivered
from observers import ArrowBatch, CloseReason, Origin, PartitionContext, ReplayRequired, Unavailable
from observers.host_side import delivering
from processor.changefeed.selection import parse_event_time
from processor.clock import Clock
from processor.host.health.freshness import feed_ages
from processor.host.health.lease_recorder import LeaseRecorder
from processor.host.host_config import DeliveryPolicy, OnObserverError
from processor.host.leasing.held_lease import HeldLease
from processor.host.worker.dead_letter_folder import DeadLetter, DeadLetterFolder
from processor.host.worker.worker_env import WorkerEnded, WorkerEnv
from processor.plugins.observer_calls import ObserverCalls
from processor.reading.lease_batch import LeaseBatch
from processor.reading.lease_position import LeasePosition
from processor.waiting import wait_any


def check_still_ours(held: HeldLease, stop: asyncio.Event) -> None:
    """Errors: `WorkerEnded` when the host stops (`stop`), or the lease is lost or handed
    over."""
    if stop.is_set():
        raise WorkerEnded(CloseReason.SHUTDOWN)
    if not held.is_usable():
        raise WorkerEnded(CloseReason.LEASE_LOST)
    if held.handover.is_set():
        raise WorkerEnded(CloseReason.HANDED_OVER)


class NotDelivered(Enum):
    """Why a batch's events did not reach the observer, though the checkpoint may pass them."""

    DEAD_LETTERED = "dead_lettered"  # in the dead-letter folder instead
    HELD_ALREADY = "held_already"  # the observer holds every one of them already


@dataclass(slots=True)
class Delivery:
    held: HeldLease
    calls: ObserverCalls
    ctx: PartitionContext
    log: Any
    policy: DeliveryPolicy
    processor: str  # the processor's name, for the batches' origin
    clock: Clock
    progress: LeaseRecorder
    stop: asyncio.Event  # the host is draining
    dead_letters: DeadLetterFolder | None  # with OnObserverError.DEAD_LETTER
    batches: int = 0  # accepted, for the worker's last log line
    events: int = 0
    held_events: int = 0  # left out: the observer held them already
    floor: str | None = None  # what the observer holds: events at or below it are left out
    floor_asked: bool = False

    async def deliver(
        self, batch: LeaseBatch, start: LeasePosition, end: LeasePosition
    ) -> Delivered | NotDelivered:
        """Hand the batch from `start` to `end` to the observer: what it accepted, or why it
        did not reach it. Errors: `WorkerEnded`."""
        held, clock, progress = self.held, self.clock, self.progress
        origin = Origin(held.token, batch.segment, self.processor, clock.wall())
        events = await self._not_held(batch.arrow(origin))
        if not len(events):
            return NotDelivered.HELD_ALREADY
        checked_at = clock.monotonic()
        if not held.is_usable():  # fencing: the last check before user code sees events
            raise WorkerEnded(CloseReason.LEASE_LOST)
        # when it was last known to be ours (CLOCK_MONOTONIC: comparable across processes)
        self.log.debug(
            "batch.delivering",
            events=len(events),
            mono=checked_at,
            first=events.positions[0].as_py(),
            last=events.positions[-1].as_py(),
        )
        progress.delivering(held.token)
        try:
            with delivering(self.ctx, end):
                await self._with_retries(events)
        except Exception as e:
            check_still_ours(held, self.stop)  # lost, handed over or stopping: it comes again
            error = f"process_changes: {e!r}"
            if isinstance(e, ReplayRequired):  # the observer lost batches it had accepted
                raise WorkerEnded(CloseReason.OBSERVER_ERROR, error) from e
            where = f"batch {start.to_json()} to {end.to_json()}"
            if self.policy.on_observer_error is OnObserverError.STOP:
                raise WorkerEnded(
                    CloseReason.OBSERVER_ERROR, f"{error} on {where}", park=True
                ) from e
            await self._dead_letter(events, start, end, error)
            return NotDelivered.DEAD_LETTERED
        self.batches += 1
        self.events += len(events)
        progress.ages.observe("feed", feed_ages(events, clock.wall()))
        last_time = _last_event_time(events)
        progress.delivered(
            held.token,
            events=len(events),
            read_bytes=batch.read_bytes,
            read_share=batch.read_share,
            last_event_time=last_time,
        )
        return Delivered(len(events), batch.read_bytes, last_time)

    async def _not_held(self, events: ArrowBatch) -> ArrowBatch:
        """The events the observer does not hold yet. Asked once per lease, before its first
        batch; an observer that fails to say gets every event (it must then recognise them)."""
        if not self.floor_asked:
            self.floor_asked = True
            first = events.positions[0].as_py()
            try:
                self.floor = await self.calls.held_through(self.ctx, first)
            except Exception as e:
                check_still_ours(self.held, self.stop)
                self.log.warning("observer.held_through_failed", error=repr(e))
            if self.floor is not None:
                self.log.info("observer.holds", through=self.floor, first=first)
        if self.floor is None:
            return events
        tail = events.after(self.floor)
        self.held_events += len(events) - len(tail)
        if len(tail):
            self.floor = None  # past it: the later batches are all above
        self.log.debug("batch.held_already", events=len(events) - len(tail))
        return tail

    async def _with_retries(self, events: ArrowBatch) -> None:
        held, policy, stop = self.held, self.policy, self.stop
        attempts = 0 if policy.on_observer_error is OnObserverError.RETRY else policy.attempts
        backoff = wait_random_exponential(multiplier=0.2, max=30.0)

        failed = 0  # attempts the observer failed (not those it could not make: `Unavailable`)

        def give_up(state: RetryCallState) -> bool:
            nonlocal failed
            error = state.outcome.exception() if state.outcome else None
            failed += not isinstance(error, Unavailable)
            return (
                bool(attempts and failed >= attempts)
                or isinstance(error, ReplayRequired)
                or not held.is_usable()
                or stop.is_set()
                or held.handover.is_set()
            )

        def log_retry(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            if isinstance(error, Unavailable):  # the host reports the outage, not the lease
                self.log.debug("observer.unavailable", attempt=state.attempt_number)
                return
            self.progress.observer_failed(held.token)
            self.log.warning("observer.retry", attempt=state.attempt_number, error=repr(error))

        def wait(state: RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome else None
            if isinstance(error, Unavailable):
                return error.retry_after_s
            return backoff(state)

        async def pause(seconds: float) -> None:  # a backoff the host's stop cuts short
            await wait_any(stop, held.lost, held.handover, timeout_s=seconds)

        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(Exception),
            stop=give_up,
            wait=wait,
            sleep=pause,
            before_sleep=log_retry,
            reraise=True,
        ):
            with attempt:
                await self.calls.process(self.ctx, events, still_ours=held.is_fresh)

    async def _dead_letter(
        self, events: ArrowBatch, start: LeasePosition, end: LeasePosition, error: str
    ) -> None:
        held, folder = self.held, self.dead_letters
        assert folder is not None, "dead-letter needs a folder"
        try:
            letter = DeadLetter(
                processor=self.processor,
                lease=held.token,
                epoch=held.epoch,
                host=self.ctx.host_name,
                start=start.to_json(),
                end=end.to_json(),
                error=error,
                at=self.clock.wall(),
                records=events.dicts(),
            )
            path = await asyncio.to_thread(folder.write, letter)
        except OSError as e:
            raise WorkerEnded(CloseReason.OBSERVER_ERROR, f"{error}; dead letter: {e}") from e
        self.progress.dead_lettered(held.token)
        self.log.error("batch.dead_lettered", events=len(events), path=str(path), error=error)


def delivery_for(
    held: HeldLease, env: WorkerEnv, calls: ObserverCalls, ctx: PartitionContext, log: Any
) -> Delivery:
    """The delivery of a worker of the host `env` describes."""
    deps = env.deps
    return Delivery(
        held,
        calls,
        ctx,
        log,
        policy=env.policy.delivery,
        processor=env.policy.processor,
        clock=deps.clock,
        progress=deps.progress,
        stop=env.signals.stop,
        dead_letters=deps.dead_letters,
    )


def _last_event_time(events: ArrowBatch) -> datetime | None:
    """When the batch's last event happened (None: it does not say, or not readably)."""
    if "eventTime" not in events.records.column_names or not len(events):
        return None
    raw = events.records.column("eventTime")[-1].as_py()
    try:
        return parse_event_time(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
