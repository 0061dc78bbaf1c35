"""An observer for the image tests, mounted into the containers (on PYTHONPATH), as a user's own
observer would be: the jsonl observer, slowed by CFP_TEST_BATCH_DELAY_S a batch, so that a host
still holds leases with work left when it is killed or stopped."""

from __future__ import annotations

import os
import time
from pathlib import Path

from observers import ArrowBatch, PartitionContext
from observers.builtin.jsonl import JsonlObserver, JsonlOptions


class PacedJsonl:
    def __init__(self) -> None:
        self._out: JsonlObserver | None = None
        self._delay_s = float(os.environ.get("CFP_TEST_BATCH_DELAY_S", "0"))

    def process_arrow(self, ctx: PartitionContext, batch: ArrowBatch) -> None:
        if self._out is None:
            self._out = JsonlObserver(JsonlOptions(Path(os.environ["CFP_TEST_OUT"])))
        self._out.process_arrow(ctx, batch)
        time.sleep(self._delay_s)
