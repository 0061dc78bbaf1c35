"""Observers used by the host integration tests, loaded by `cfp run --observer tests.plugins:...`.

`PacedJsonl` writes like `jsonl:DIR` and then sleeps, so batches take long enough for faults to
land in the middle of the work. Configured through the environment of each host process:
CFP_TEST_OUT (the directory), CFP_TEST_BATCH_DELAY_S (sleep per batch), CFP_TEST_SLOW_LEASES
(comma-separated lease tokens that sleep CFP_TEST_SLOW_DELAY_S instead), or CFP_TEST_SLOW_FILE (a
file holding such a list, read again before every batch: a test may change it as hosts run).
It takes hints too, and CFP_TEST_HINT_DELAY_S makes it sit on each batch of them that long.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from observers import ArrowBatch, ChangeEvent, PartitionContext
from observers.builtin.jsonl import JsonlObserver, JsonlOptions


class PacedJsonl:
    def __init__(self) -> None:
        self._out: JsonlObserver | None = None
        self._delay_s = float(os.environ.get("CFP_TEST_BATCH_DELAY_S", "0"))
        self._slow = set(filter(None, os.environ.get("CFP_TEST_SLOW_LEASES", "").split(",")))
        self._slow_delay_s = float(os.environ.get("CFP_TEST_SLOW_DELAY_S", "0"))
        self._slow_file = os.environ.get("CFP_TEST_SLOW_FILE")

    def process_arrow(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        if self._out is None:
            self._out = JsonlObserver(JsonlOptions(Path(os.environ["CFP_TEST_OUT"])))
        self._out.process_arrow(ctx, batch)
        slow = self._slow
        if self._slow_file is not None:
            with open(self._slow_file, encoding="utf-8") as f:
                slow = set(filter(None, f.read().strip().split(",")))
        time.sleep(self._slow_delay_s if ctx.lease_token in slow else self._delay_s)

    def process_hints(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        """Hints as `jsonl` writes them; with CFP_TEST_HINT_DELAY_S, it says it holds a batch
        (`test.hints_held`) and then sleeps that long before writing it."""
        if self._out is None:
            self._out = JsonlObserver(JsonlOptions(Path(os.environ["CFP_TEST_OUT"])))
        if delay_s := float(os.environ.get("CFP_TEST_HINT_DELAY_S", "0")):
            ctx.log.info("test.hints_held", hints=len(batch))
            time.sleep(delay_s)
        self._out.process_hints(ctx, batch)


class SlowToOpen:
    """A factory of `PacedJsonl` observers that takes CFP_TEST_OPEN_DELAY_S seconds to open, as
    a Spark session does (`--observer tests.plugins:slow_to_open`): its host sits `starting`
    meanwhile, its row written, holding no lease."""

    def __call__(self) -> PacedJsonl:
        return PacedJsonl()

    async def __aenter__(self) -> SlowToOpen:
        await asyncio.sleep(float(os.environ.get("CFP_TEST_OPEN_DELAY_S", "0")))
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


slow_to_open = SlowToOpen()


class FailingObserver:
    """Fails every batch: the lease must close with OBSERVER_ERROR and nothing be checkpointed."""

    async def process_changes(self, ctx: PartitionContext, events: Sequence[ChangeEvent]) -> None:
        raise RuntimeError(f"refusing {len(events)} events of lease {ctx.lease_token}")


class PoisonJsonl(PacedJsonl):
    """`PacedJsonl` that refuses every batch holding an event whose id is listed in
    CFP_TEST_POISON_IDS, and refuses the first CFP_TEST_FAIL_FIRST batches of the process
    (a transient failure; counted over all leases of the process)."""

    failures_left: int | None = None
    lock = threading.Lock()  # sync observers run in threads, one per lease at a time

    def __init__(self) -> None:
        super().__init__()
        self._poison = set(filter(None, os.environ.get("CFP_TEST_POISON_IDS", "").split(",")))
        if PoisonJsonl.failures_left is None:
            PoisonJsonl.failures_left = int(os.environ.get("CFP_TEST_FAIL_FIRST", "0"))

    def process_arrow(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        with PoisonJsonl.lock:
            fail = bool(PoisonJsonl.failures_left)
            if fail and PoisonJsonl.failures_left is not None:
                PoisonJsonl.failures_left -= 1
        if fail:
            raise RuntimeError("transient failure")
        poisoned = [i for i in batch.changes().column("id").to_pylist() if i in self._poison]
        if poisoned:
            raise ValueError(f"poison events {poisoned}")
        super().process_arrow(ctx, batch)
