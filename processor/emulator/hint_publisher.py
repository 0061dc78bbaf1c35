"""What Event Grid would do with the emulator's operations: one Blob Storage event per change,
written into an Azurite queue (`cfp emulate --live --hints-queue`), with the faults of a real
subscription at chosen rates.

Faults, each a probability per event: `drop` (never delivered), `duplicate` (delivered twice),
`late` (delivered only after the feed's record is out), `reorder` (held back up to
`REORDER_S`, so later events overtake it) and `poison` (a bad message beside it). A background
task sends what is due every `TICK_S`; `aclose` sends what is left (dropped ones excepted)."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import random
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from processor.emulator.grid_events import grid_event, queue_text

TICK_S = 0.05
REORDER_S = 3.0
LATE_AFTER_S = 2.0  # a late hint comes this much (up to twice this) after the feed's record
SENDS_AT_ONCE = 32
POISON_BODIES = (  # what a poisoned subscription may put in a queue, each a different reason
    "this is not an event",
    '{"not": "an event"}',
    '{"eventType": "Microsoft.Storage.BlobCreated", "subject": "/blobServices/default/'
    'containers/c/blobs/../../x", "eventTime": "2026-01-01T00:00:00Z", "id": "1", "topic": '
    '"/subscriptions/s/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/other1"}',
)


@dataclass(frozen=True, slots=True)
class HintFaults:
    drop: float = 0.0
    duplicate: float = 0.0
    late: float = 0.0
    reorder: float = 0.0
    poison: float = 0.0

    def __post_init__(self) -> None:
        for name in ("drop", "duplicate", "late", "reorder", "poison"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"--hint-{name} must be a rate between 0 and 1")


@dataclass(frozen=True, slots=True)
class HintStyle:
    """How the subscription delivers: its schema, and whether bodies are Base64."""

    cloud_events: bool = False
    encoded: bool = True


class HintPublisher:
    """Sends each operation's event to `queue` (an aio `QueueClient`) when it is due."""

    def __init__(
        self,
        queue: Any,
        rng: random.Random,
        *,
        faults: HintFaults = HintFaults(),
        style: HintStyle = HintStyle(),
        feed_delay_s: float = 0.0,
    ) -> None:
        self.queue, self.faults, self.style = queue, faults, style
        self._rng = rng
        self._feed_delay_s = feed_delay_s
        self._due: list[tuple[float, int, str]] = []  # (due, order, text), a heap
        self._order = itertools.count()
        self._sending = asyncio.Semaphore(SENDS_AT_ONCE)
        self._task: asyncio.Task[None] | None = None
        self.counts: Counter[str] = Counter()

    def publish(self, record: Mapping[str, Any]) -> None:
        """Queue the event of one feed record (none for the feed's own types) with its faults."""
        event = grid_event(record, cloud_events=self.style.cloud_events)
        if event is None:
            return
        pick, faults, now = self._rng.random, self.faults, time.monotonic()
        if pick() < faults.poison:
            self._at(now, self._rng.choice(POISON_BODIES))
            self.counts["poison"] += 1
        if pick() < faults.drop:
            self.counts["dropped"] += 1
            return
        due = now
        if pick() < faults.late:
            due += self._feed_delay_s + LATE_AFTER_S * (1 + pick())
            self.counts["late"] += 1
        elif pick() < faults.reorder:
            due += REORDER_S * pick()
            self.counts["reordered"] += 1
        text = queue_text(event, encoded=self.style.encoded)
        copies = 2 if pick() < faults.duplicate else 1
        self.counts["duplicated"] += copies - 1
        for _ in range(copies):
            self._at(due, text)
        self.counts["events"] += 1

    def _at(self, due: float, text: str) -> None:
        heapq.heappush(self._due, (due, next(self._order), text))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self._send_due(time.monotonic())
            await asyncio.sleep(TICK_S)

    async def _send_due(self, now: float) -> None:
        texts = []
        while self._due and self._due[0][0] <= now:
            texts.append(heapq.heappop(self._due)[2])
        if texts:
            await asyncio.gather(*(self._send(t) for t in texts))

    async def _send(self, text: str) -> None:
        async with self._sending:
            await self.queue.send_message(text)
        self.counts["messages"] += 1

    async def aclose(self) -> None:
        """Send everything still held (late and reordered ones too), then stop."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._send_due(float("inf"))

    def to_json(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))
