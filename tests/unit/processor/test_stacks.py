"""`kill -USR1`: where each task of a host waits, through its chain of awaits."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any

import structlog

from processor.stacks import awaits, log_stacks_on_signal
from tests import patience


async def _inner(gate: asyncio.Event) -> None:
    await gate.wait()


async def _outer(gate: asyncio.Event) -> None:
    await _inner(gate)


async def test_a_suspended_task_shows_each_await_down_to_the_future() -> None:
    gate = asyncio.Event()
    task = asyncio.create_task(_outer(gate))
    await asyncio.sleep(0)
    frames = awaits(task.get_coro())
    names = [f.rsplit(" ", 1)[-1] for f in frames]
    assert names[:3] == ["_outer", "_inner", "wait"]
    assert frames[-1].startswith("awaiting ")
    gate.set()
    await task


async def test_sigusr1_logs_the_tasks_and_threads() -> None:
    gate, release = asyncio.Event(), threading.Event()
    task = asyncio.create_task(_outer(gate), name="held")
    thread = threading.Thread(target=release.wait, name="blocking-call")
    thread.start()
    log_stacks_on_signal(asyncio.get_running_loop())
    try:
        with structlog.testing.capture_logs() as logs:
            os.kill(os.getpid(), signal.SIGUSR1)
            # the handler runs on one of the loop's next turns; nothing to wait on but the log
            async with asyncio.timeout(patience.left_s()):
                while not any(e["event"] == "host.stacks" for e in logs):  # noqa: ASYNC110
                    await asyncio.sleep(0)
    finally:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGUSR1)
        release.set()
        thread.join()
        gate.set()
        await task
    (event,) = [e for e in logs if e["event"] == "host.stacks"]
    tasks: dict[str, Any] = event["tasks"]
    assert any("_inner" in f for f in tasks["held"])
    (blocked,) = [frames for name, frames in event["threads"].items() if "blocking-call" in name]
    assert any(" wait" in f for f in blocked)


def test_anything_else_ends_the_chain() -> None:
    assert awaits(None) == []
    assert awaits(object()) == ["awaiting object"]
