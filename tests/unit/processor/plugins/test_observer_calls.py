"""Calling an observer: plain methods in a thread, async ones in the loop, the lease checked last."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from observers import (
    ArrowBatch,
    ChangeEvent,
    CloseReason,
    LeaseLostError,
    PartitionContext,
    PluginLoadError,
)
from observers.origin import Origin
from processor.plugins import ObserverCalls, observer_pool
from tests import patience


def empty() -> ArrowBatch:
    return ArrowBatch.from_records([], [], Origin("03", "idx/segments/2026/01/01/0000/meta.json"))


def ctx() -> PartitionContext:
    return PartitionContext(lease_token="03", host_name="host-a", epoch=4)


def test_an_instance_without_process_changes_is_refused() -> None:
    with pytest.raises(PluginLoadError, match="no process_changes"):
        ObserverCalls(object(), spec="x:y")


async def test_plain_methods_run_in_a_thread_and_async_ones_in_the_loop() -> None:
    seen: dict[str, int] = {}

    class Mixed:
        auto_checkpoint = False

        def open(self, c: PartitionContext) -> None:
            seen["open"] = threading.get_ident()

        async def process_changes(self, c: PartitionContext, events: Sequence[ChangeEvent]) -> None:
            seen["process"] = threading.get_ident()

        def close(self, c: PartitionContext, reason: CloseReason) -> None:
            seen["close"] = threading.get_ident()

    calls = ObserverCalls(Mixed())
    await calls.open(ctx())
    await calls.process(ctx(), empty())
    await calls.close(ctx(), CloseReason.SHUTDOWN)
    loop_thread = threading.get_ident()
    assert seen["process"] == loop_thread
    assert seen["open"] != loop_thread and seen["close"] != loop_thread
    assert calls.auto_checkpoint is False


async def test_open_and_close_are_optional() -> None:
    class OnlyProcess:
        def process_changes(self, c: PartitionContext, events: Sequence[ChangeEvent]) -> None:
            pass

    calls = ObserverCalls(OnlyProcess())
    await calls.open(ctx())
    await calls.close(ctx(), CloseReason.LEASE_LOST)
    assert calls.auto_checkpoint is True


@pytest.mark.parametrize("kind", ["plain", "async"])
async def test_a_lease_no_longer_ours_is_checked_just_before_the_method(kind: str) -> None:
    """The host's checks come before a thread hop (plain methods) and retry pauses: a host paused
    in between must not hand the batch over once it resumes with the lease gone."""
    checked_in: list[int] = []
    ran: list[str] = []

    class Plain:
        def process_changes(self, c: PartitionContext, events: Sequence[ChangeEvent]) -> None:
            ran.append("plain")

    class Async:
        async def process_changes(self, c: PartitionContext, events: Sequence[ChangeEvent]) -> None:
            ran.append("async")

    def still_ours() -> bool:
        checked_in.append(threading.get_ident())
        return len(checked_in) == 1  # ours the first time, lost afterwards

    calls = ObserverCalls(Plain() if kind == "plain" else Async())
    await calls.process(ctx(), empty(), still_ours=still_ours)
    with pytest.raises(LeaseLostError):
        await calls.process(ctx(), empty(), still_ours=still_ours)
    assert ran == [kind]
    on_loop = checked_in[0] == threading.get_ident()
    assert on_loop is (kind == "async")  # a plain method's check runs in its own thread


async def test_plain_methods_run_in_the_observer_pool_not_the_decoders() -> None:
    """A plain observer blocked in its method holds a thread of the observer pool only: the
    loop's default pool (where the decoder runs) still answers, and a second lease's plain call
    waits for the pool's one thread."""
    release, entered = threading.Event(), threading.Event()
    names: list[str] = []

    class Blocking:
        def process_changes(self, c: PartitionContext, events: Sequence[ChangeEvent]) -> None:
            names.append(threading.current_thread().name)
            entered.set()
            release.wait(patience.left_s())

    pool = observer_pool(threads=1)
    try:
        first = asyncio.create_task(ObserverCalls(Blocking(), pool=pool).process(ctx(), empty()))
        second = asyncio.create_task(ObserverCalls(Blocking(), pool=pool).process(ctx(), empty()))
        assert await asyncio.to_thread(entered.wait, patience.left_s())
        assert await asyncio.to_thread(lambda: "decoded") == "decoded"  # the default pool is free
        assert len(names) == 1 and not second.done()  # the pool's one thread is taken
        release.set()
        await asyncio.wait_for(asyncio.gather(first, second), patience.left_s())
    finally:
        release.set()
        pool.shutdown(wait=True)
    assert len(names) == 2 and all(name.startswith("cfp-observer") for name in names)
