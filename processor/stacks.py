"""`kill -USR1 <pid>`: a host logs where each of its asyncio tasks and threads waits.

A host that stops making progress while it keeps renewing its leases shows nothing in its log;
the awaits of its tasks (a worker held in back-pressure, a Spark call that never returned) tell
why. A task's own `get_stack()` shows one frame of a suspended coroutine, so the chain of
awaits is followed here instead.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import traceback
from types import CoroutineType, FrameType, GeneratorType
from typing import Any

import structlog

log = structlog.get_logger("cfp.stacks")

MAX_DEPTH = 40


def awaits(coro: Any) -> list[str]:
    """`file:line function` of each frame in a coroutine's chain of awaits, outermost first."""
    out: list[str] = []
    while coro is not None and len(out) < MAX_DEPTH:
        frame: FrameType | None
        if isinstance(coro, CoroutineType):
            frame, coro = coro.cr_frame, coro.cr_await
        elif isinstance(coro, GeneratorType):
            frame, coro = coro.gi_frame, coro.gi_yieldfrom
        else:  # a future, or an awaitable of C code: the end of the chain
            out.append(f"awaiting {type(coro).__name__}")
            break
        if frame is not None:
            out.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
    return out


def thread_stacks() -> dict[str, list[str]]:
    """The current stack of every other thread (Spark calls run in threads)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    here = threading.get_ident()
    return {
        f"{names.get(ident, '?')}#{ident}": [
            f"{f.filename}:{f.lineno} {f.name}" for f in traceback.extract_stack(frame)
        ]
        for ident, frame in sys._current_frames().items()
        if ident != here
    }


def log_stacks() -> None:
    tasks = {
        task.get_name(): awaits(task.get_coro()) for task in asyncio.all_tasks() if not task.done()
    }
    log.warning("host.stacks", tasks=tasks, threads=thread_stacks())


def log_stacks_on_signal(loop: asyncio.AbstractEventLoop) -> None:
    """SIGUSR1 logs the stacks (on the loop: the tasks are only safe to walk there)."""
    loop.add_signal_handler(signal.SIGUSR1, log_stacks)
