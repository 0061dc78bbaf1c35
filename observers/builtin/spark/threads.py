"""Where the Spark observer's blocking calls run: Spark's client and Arrow work block, the host's
event loop must not."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

T = TypeVar("T")


async def run_blocking(pool: Executor, fn: Callable[[], T]) -> T:
    """`fn`, a blocking call (Spark, or CPU work on a batch), in a thread of `pool`, with the
    caller's context (the log fields bound to it), as `asyncio.to_thread` would."""
    call = functools.partial(contextvars.copy_context().run, fn)
    return await asyncio.get_running_loop().run_in_executor(pool, call)


async def in_daemon_thread(fn: Callable[[], T], name: str = "spark-open") -> T:
    """`fn`'s result, run in a daemon thread of its own. Unlike `asyncio.to_thread`, a caller
    that gives up (a host stopped while its Spark session opens, a server that does not answer)
    does not keep the process alive: the interpreter joins executor threads on exit, never
    daemon ones (an embedded JVM then exits with its Python parent, on the end of its
    standard input)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.done():  # the caller gave up on it
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        result: T | None = None
        error: BaseException | None = None
        try:
            result = context.run(fn)
        except BaseException as e:  # handed to the waiting coroutine
            error = e
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await done
