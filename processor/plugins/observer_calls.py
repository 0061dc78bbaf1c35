"""Calling an observer uniformly: whether each of its methods is async is decided once per
instance, not per call; plain methods run in a thread of the host's observer pool, so that they
block neither the host's event loop nor the threads that decode the feed."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from observers import (
    ArrowBatch,
    ArrowObserver,
    CloseReason,
    Closes,
    EventBatch,
    KnowsWhatItHolds,
    LeaseLostError,
    Observer,
    Opens,
    PartitionContext,
    PluginLoadError,
    TakesHints,
    checkpoints_after_each_batch,
    takes_arrow,
    takes_changes,
    takes_hints,
)

DEFAULT_OBSERVER_THREADS = 16


def observer_pool(threads: int = DEFAULT_OBSERVER_THREADS) -> ThreadPoolExecutor:
    """The threads a host runs its observers' plain methods in (`--observer-threads`): at most
    `threads` plain calls at once, over all leases; a call past them waits for a thread. The
    decoder keeps the event loop's default pool to itself."""
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="cfp-observer")


async def in_pool(pool: Executor | None, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in `pool` (None: the loop's default one), with the caller's context vars."""
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(pool, call)


def _adapt(
    method: Callable[..., Any] | None, pool: Executor | None
) -> Callable[..., Awaitable[Any]]:
    """An optional method as a coroutine function: a plain one runs in `pool`, a missing one
    does nothing and returns None."""
    if method is None:

        async def nothing(*args: Any) -> None:
            return None

        return nothing
    if inspect.iscoroutinefunction(method):
        return method

    async def in_thread(*args: Any) -> Any:
        return await in_pool(pool, method, *args)

    return in_thread


def _check(still_ours: Callable[[], bool] | None, ctx: PartitionContext) -> None:
    """The lease, checked again right before the observer's code (in a plain method's thread):
    the process may have been paused or starved since the host's own check."""
    if still_ours is not None and not still_ours():
        raise LeaseLostError(ctx.lease_token, ctx.epoch)


def _checked_call(
    still_ours: Callable[[], bool] | None,
    method: Callable[..., Any],
    ctx: PartitionContext,
    batch: object,
) -> None:
    _check(still_ours, ctx)
    method(ctx, batch)


class ObserverCalls:
    """One observer instance with async entry points, whatever kind of methods it has, and
    whichever form of a batch it takes (`process_arrow` if it has one, else `process_changes`).
    """

    def __init__(self, observer: object, *, spec: str = "", pool: Executor | None = None) -> None:
        self.observer = observer
        self.auto_checkpoint = checkpoints_after_each_batch(observer)
        self.takes_arrow = takes_arrow(observer)
        self._process: Callable[..., Any]
        if isinstance(observer, ArrowObserver) and self.takes_arrow:
            self._process = observer.process_arrow
        elif isinstance(observer, Observer) and takes_changes(observer):
            self._process = observer.process_changes
        else:
            raise PluginLoadError(
                spec, f"{type(observer).__name__} has no process_changes or process_arrow method"
            )
        self._pool = pool  # None: the loop's default pool (tests)
        self._process_is_async = inspect.iscoroutinefunction(self._process)
        self._open = _adapt(observer.open if isinstance(observer, Opens) else None, pool)
        self._close = _adapt(observer.close if isinstance(observer, Closes) else None, pool)
        self._held_through = _adapt(
            observer.held_through if isinstance(observer, KnowsWhatItHolds) else None, pool
        )
        self.takes_hints = takes_hints(observer)
        self._hints = _adapt(
            observer.process_hints if isinstance(observer, TakesHints) else None, pool
        )

    async def open(self, ctx: PartitionContext) -> None:
        await self._open(ctx)

    async def held_through(self, ctx: PartitionContext, first: str) -> str | None:
        """The lease's highest position the observer already holds (`KnowsWhatItHolds`), or
        None: it does not say. Errors: the observer's. A value that is not a string is a bug of
        the observer's, said as a `TypeError`."""
        held = await self._held_through(ctx, first)
        if held is not None and not isinstance(held, str):
            raise TypeError(
                f"{type(self.observer).__name__}.held_through returned {held!r}, not a position"
            )
        return held

    async def process(
        self,
        ctx: PartitionContext,
        batch: ArrowBatch,
        *,
        still_ours: Callable[[], bool] | None = None,
    ) -> None:
        """Hand `batch` over: as it is to `process_arrow`, as `ChangeEvent`s (made from it on
        first access) to `process_changes`. `still_ours`, when given, is checked just before
        the method runs (in a plain method's thread), and `LeaseLostError` raised if it fails:
        the last moment at which a host paused or starved since its own checks can still be
        stopped."""
        given: object = batch if self.takes_arrow else EventBatch(batch)
        if self._process_is_async:
            _check(still_ours, ctx)
            await self._process(ctx, given)
        else:
            await in_pool(self._pool, _checked_call, still_ours, self._process, ctx, given)

    async def hints(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        """Hand a provisional batch to `process_hints` (`TakesHints`; nothing without it)."""
        await self._hints(ctx, batch)

    async def close(self, ctx: PartitionContext, reason: CloseReason) -> None:
        await self._close(ctx, reason)
