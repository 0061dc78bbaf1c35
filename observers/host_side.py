"""The host's side of a `PartitionContext`, kept off the face a plugin sees: where a context's
checkpoints go, and which batch `mark()` names while the observer processes it. Only the host
(and tests standing in for it) call these; a plugin gets a context ready made."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from observers.protocol import PartitionContext

OnCheckpoint = Callable[[object | None], Awaitable[None]]


def host_context(
    *,
    lease_token: str,
    host_name: str,
    epoch: int,
    processor_name: str = "",
    log: Any = None,
    on_checkpoint: OnCheckpoint | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
) -> PartitionContext:
    """A lease's context whose `checkpoint(mark)` goes to `on_checkpoint`, and whose
    `checkpoint_blocking` sends it through `loop` (the host's event loop) from a plain method's
    thread."""
    ctx = PartitionContext(lease_token, host_name, epoch, processor_name)
    if log is not None:
        ctx.log = log
    ctx._on_checkpoint = on_checkpoint
    ctx._loop = loop
    return ctx


@contextmanager
def delivering(ctx: PartitionContext, mark: object) -> Iterator[None]:
    """`ctx.mark()` gives `mark` while the batch that ends there is processed."""
    ctx._mark = mark
    try:
        yield
    finally:
        ctx._mark = None
