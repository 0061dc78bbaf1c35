"""Calling an observer: plain methods in a thread, async ones in the loop, the lease checked last."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from observers import (
    ChangeEvent,
    CloseReason,
    LeaseLostError,
    PartitionContext,
    PluginLoadError,
)
from processor.plugins import ObserverCalls


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
    await calls.process_changes(ctx(), [])
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
    await calls.process_changes(ctx(), [], still_ours=still_ours)
    with pytest.raises(LeaseLostError):
        await calls.process_changes(ctx(), [], still_ours=still_ours)
    assert ran == [kind]
    on_loop = checked_in[0] == threading.get_ident()
    assert on_loop is (kind == "async")  # a plain method's check runs in its own thread
