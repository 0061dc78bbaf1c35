"""The host's side of a lease's context: checkpoints go where the host says, `mark()` names the
batch being processed, and a plugin's view of the context shows none of it."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect

import pytest

from observers import PartitionContext
from observers.host_side import delivering, host_context


def test_a_plugin_sees_only_the_leases_identity_its_log_and_the_checkpoint_calls() -> None:
    made_by_plugin = [f.name for f in dataclasses.fields(PartitionContext) if f.init]
    assert made_by_plugin == ["lease_token", "host_name", "epoch", "processor_name", "log"]
    public = {n for n, _ in inspect.getmembers(PartitionContext) if not n.startswith("_")}
    assert public == {"checkpoint", "checkpoint_blocking", "mark", "log", "processor_name"} | {
        "lease_token",
        "host_name",
        "epoch",
    }
    assert "on_checkpoint" not in repr(PartitionContext("00", "h1", 1))


async def test_checkpoints_go_to_the_host_with_the_mark_of_the_batch_in_hand() -> None:
    seen: list[object | None] = []

    async def on_checkpoint(mark: object | None) -> None:
        seen.append(mark)

    ctx = host_context(lease_token="00", host_name="h1", epoch=2, on_checkpoint=on_checkpoint)
    with pytest.raises(RuntimeError, match="only meaningful inside"):
        ctx.mark()
    with delivering(ctx, "after batch 7"):
        mark = ctx.mark()
    await ctx.checkpoint(mark)
    await ctx.checkpoint()
    assert seen == ["after batch 7", None]
    with pytest.raises(RuntimeError, match="only meaningful inside"):
        ctx.mark()  # the batch is over


async def test_a_plain_method_checkpoints_through_the_hosts_loop_from_its_thread() -> None:
    seen: list[object | None] = []

    async def on_checkpoint(mark: object | None) -> None:
        seen.append(mark)

    loop = asyncio.get_running_loop()
    ctx = host_context(
        lease_token="00", host_name="h1", epoch=2, on_checkpoint=on_checkpoint, loop=loop
    )
    await asyncio.to_thread(ctx.checkpoint_blocking, "m")
    assert seen == ["m"]
    unwired = PartitionContext("00", "h1", 2)
    await unwired.checkpoint("ignored")  # a context made outside a host checkpoints nothing
    await asyncio.to_thread(unwired.checkpoint_blocking, "ignored")
    assert seen == ["m"]
