"""`cfp emulate`: real blob operations against Azurite plus the change feed Azure would write.

Every operation really happens (the live listing afterwards is the truth the feed must explain);
its record carries the ETag and length storage returned. Operations run concurrently in windows
of distinct blobs, and their records are appended in operation order, so the feed's content and
order depend only on the seed and the starting blobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import structlog
from azure.storage.blob.aio import BlobServiceClient

from processor.changefeed.errors import UnsafeEndpoint
from processor.changefeed.storage.layout import (
    CONTAINER,
    SEGMENT_INTERVAL,
    SEGMENT_PREFIX,
    is_init_segment,
    is_segment_path,
    segment_time,
)
from processor.connection import is_loopback_endpoint
from processor.emulator.account_blobs import AccountBlobs
from processor.emulator.hint_publisher import HintPublisher
from processor.emulator.live_writer import LiveFeedWriter
from processor.emulator.records import RecordFactory
from processor.emulator.schemas import SUPPORTED_VERSIONS
from processor.emulator.workload import Op, Workload

log = structlog.get_logger("cfp.emulator")

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    seed: int = 0
    start_time: datetime | None = None
    segments: int = 3
    events_per_segment: int = 500
    shards: tuple[int, ...] = (2, 3, 1)
    schema_version: int = 5
    block_events: tuple[int, int] = (1, 60)
    chunk_bytes: int = 4 << 20
    containers: int = 3
    blobs_per_container: int = 200
    max_blob_bytes: int = 2048
    control_every: int = 250
    concurrency: int = 32
    finalize_last: bool = True
    # write the change feed only, with made-up ETags, and leave the blobs alone: 4x faster, for
    # readers and hosts that never look at the account's blobs (not `cfp verify`, not a scan)
    feed_only: bool = False

    def __post_init__(self) -> None:
        if self.schema_version not in SUPPORTED_VERSIONS:
            raise ValueError(f"--schema-version must be one of {SUPPORTED_VERSIONS}")
        if not self.shards or min(self.shards) < 1 or max(self.shards) > 100:
            raise ValueError("--shards must be a list of counts between 1 and 100")
        lo, hi = self.block_events
        if not 1 <= lo <= hi:
            raise ValueError("--block-events must be LOW-HIGH with 1 <= LOW <= HIGH")

    def shards_for(self, index: int) -> int:
        return self.shards[index % len(self.shards)]


@dataclass(slots=True)
class EmulationSummary:
    segments: list[str] = field(default_factory=list)
    events: Counter[str] = field(default_factory=Counter)
    control_records: int = 0
    live_blobs: int = 0

    def to_json(self) -> dict[str, object]:
        """What `cfp emulate` prints."""
        return {
            "segments": self.segments,
            "events": dict(sorted(self.events.items())),
            "controlRecords": self.control_records,
            "liveBlobs": self.live_blobs,
        }


def shard_of(container: str, name: str, shards: int) -> int:
    """The shard of a blob within a segment: a stable hash of its path."""
    return zlib.crc32(f"{container}/{name}".encode()) % shards


class Emulator:
    """Drives a workload against one Azurite account and writes its change feed.

    Use `run_batch()` for a virtual-clock run, `run_live()` to keep appending in real time, or
    the step methods (`begin_segment`, `perform`, `flush`, `finalize_segment`) from tests.
    """

    def __init__(
        self,
        service: BlobServiceClient,
        config: EmulatorConfig,
        *,
        hints: HintPublisher | None = None,
        publish_delay_s: float = 0.0,
    ) -> None:
        """`hints`: where each operation's Blob Storage event goes; `publish_delay_s`: how long
        after its operation a record reaches the feed (`LiveFeedWriter`)."""
        endpoint = service.url
        if not is_loopback_endpoint(endpoint):
            raise UnsafeEndpoint(
                f"refusing to emulate against {endpoint.split('?')[0]}: only loopback endpoints "
                "(Azurite) may receive an emulated $blobchangefeed"
            )
        self._service = service
        self.config = config
        self._rng = random.Random(config.seed)
        self.writer = LiveFeedWriter(
            service.get_container_client(CONTAINER),
            rng=self._rng,
            block_events=config.block_events,
            chunk_bytes=config.chunk_bytes,
            hints=hints,
            delay_s=publish_delay_s,
        )
        self.records = RecordFactory(
            version=config.schema_version,
            account=service.account_name or "devstoreaccount1",
            blob_endpoint=endpoint,
            rng=self._rng,
        )
        self.containers = [f"cfp-emu-{i}" for i in range(config.containers)]
        self._blobs = AccountBlobs(service, self.containers, feed_only=config.feed_only)
        self.workload: Workload | None = None
        self.summary = EmulationSummary()
        self._counter = 0
        self._segment_index = 0
        self._since_control = 0

    async def setup(self) -> datetime:
        """Create containers and the feed; return the begin time of the first new segment.

        A feed that already has segments is continued after its newest one (a `Publishing`
        leftover of an interrupted live run is finalized first).
        """
        await self.writer.ensure_feed()
        existing = await self._blobs.prepare()
        self.workload = Workload(
            self._rng,
            containers=self.containers,
            blobs_per_container=self.config.blobs_per_container,
            schema_version=self.config.schema_version,
            max_blob_bytes=self.config.max_blob_bytes,
            existing=existing,
        )
        last = await self._last_segment()
        start = self.config.start_time or DEFAULT_START
        if last is not None and last + SEGMENT_INTERVAL > start:
            start = last + SEGMENT_INTERVAL
        return start.replace(minute=0, second=0, microsecond=0)

    async def _last_segment(self) -> datetime | None:
        container = self._service.get_container_client(CONTAINER)
        last: str | None = None
        async for b in container.list_blobs(name_starts_with=SEGMENT_PREFIX):
            if is_segment_path(b.name) and not is_init_segment(b.name):
                last = b.name
        if last is None:
            return None
        doc = await (await container.download_blob(last)).readall()
        if b'"Publishing"' in doc:
            await self.writer.finalize_leftover(last, doc, segment_time(last))
        return segment_time(last)

    async def begin_segment(self, begin: datetime) -> None:
        shards = self.config.shards_for(self._segment_index)
        self._segment_index += 1
        await self.writer.begin_segment(
            begin, shards=shards, schema_version=self.config.schema_version
        )
        self.summary.segments.append(f"{begin:%Y-%m-%dT%H:%MZ} shards={shards}")

    async def perform(self, count: int, *, times: Sequence[datetime] | None) -> None:
        """Perform `count` operations; operation i gets event time `times[i]` (None: the wall
        clock's when storage answered it)."""
        assert self.workload is not None, "call setup() first"
        ops = [self.workload.next_op() for _ in range(count)]
        window: list[Op] = []
        keys: set[tuple[str, str]] = set()
        start = 0
        for i, op in enumerate(ops):
            if op.key in keys or len(window) >= self.config.concurrency:
                await self._run_window(window, None if times is None else times[start:i])
                window, keys, start = [], set(), i
            window.append(op)
            keys.add(op.key)
        if window:
            await self._run_window(window, None if times is None else times[start:])

    async def _run_window(self, ops: list[Op], times: Sequence[datetime] | None) -> None:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(self._blobs.apply(op, counter=self._counter)) for op in ops]
        seg = self.writer.segment
        assert seg is not None
        now = datetime.now(UTC)
        for op, task, at in zip(ops, tasks, times or [now] * len(ops), strict=True):
            self._counter += 1
            record = self.records.blob_event(op, task.result(), at=at, counter=self._counter)
            await self.writer.add(shard_of(op.container, op.name, len(seg.shards)), record)
            self.summary.events[record["eventType"]] += 1
            self._since_control += 1
            if self.config.control_every and self._since_control >= self.config.control_every:
                await self.add_control(at)

    async def add_control(self, at: datetime, shard: int | None = None) -> None:
        seg = self.writer.segment
        assert seg is not None
        self._counter += 1
        pick = self._rng.randrange(len(seg.shards)) if shard is None else shard
        await self.writer.add(pick, self.records.control_event(at=at, counter=self._counter))
        self.summary.control_records += 1
        self._since_control = 0

    async def flush(self) -> None:
        await self.writer.flush()

    async def finalize_segment(self, at: datetime, *, move_last_consumable: bool = True) -> None:
        seg = self.writer.segment
        assert seg is not None
        await self.add_control(at, shard=len(seg.shards) - 1)
        await self.writer.finalize_segment(move_last_consumable=move_last_consumable)

    async def run_batch(self) -> EmulationSummary:
        """Write `segments` hourly segments of `events_per_segment` operations each."""
        begin = await self.setup()
        n = self.config.events_per_segment
        for i in range(self.config.segments):
            await self.begin_segment(begin)
            step = SEGMENT_INTERVAL / (n + 1)
            await self.perform(n, times=[begin + step * (k + 1) for k in range(n)])
            last = i == self.config.segments - 1
            if last and not self.config.finalize_last:
                await self.flush()
            else:
                await self.finalize_segment(begin + SEGMENT_INTERVAL - timedelta(seconds=1))
            log.info(
                "emulate.segment", begin=begin.isoformat(), records=self.writer.records_written
            )
            begin += SEGMENT_INTERVAL
        self.summary.live_blobs = len(self.workload.blobs) if self.workload else 0
        return self.summary

    async def run_live(
        self,
        stop: asyncio.Event,
        *,
        rate_per_s: float,
        segment_seconds: float,
        flush_every_s: float = 1.0,
        finish: bool = False,
        wall_clock: bool = False,
        real_hours: bool | None = None,
    ) -> EmulationSummary:
        """Append in real time until `stop` is set; a virtual hour lasts `segment_seconds`, or,
        on the `wall_clock`, a segment is a real hour and an event's time is when it happened
        (what hints and freshness are measured against; `real_hours` False keeps virtual hours
        with such times: a demo's shards change within a minute). A segment is finalized when
        its time is up; on the `wall_clock`, `lastConsumable` moves to each hour as it opens
        (Azure's records are readable minutes late, not once their hour is over). On stop,
        queued records are flushed and the open segment is left `Publishing`, as the service
        would, or finalized with `finish` (a demo or test that wants to catch up fully)."""
        begin = await self.setup()
        real_hours = wall_clock if real_hours is None else real_hours
        if self.config.start_time is None or real_hours:
            now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
            begin = max(begin, now)
        if real_hours:
            segment_seconds = SEGMENT_INTERVAL.total_seconds()
        per_tick = max(1, round(rate_per_s * flush_every_s))
        while not stop.is_set():
            await self.begin_segment(begin)
            seg_start = time.monotonic()
            if wall_clock:
                # Azure's records can be read minutes after their change, not once their hour
                # is over: the open hour is consumable from its start
                await self.writer.set_last_consumable(begin)
            if real_hours:  # the hour began before this run did
                seg_start -= max(0.0, (datetime.now(UTC) - begin).total_seconds())
            while not stop.is_set():
                elapsed = time.monotonic() - seg_start
                if elapsed >= segment_seconds:
                    break
                at = begin + SEGMENT_INTERVAL * (elapsed / segment_seconds)
                await self.perform(per_tick, times=None if wall_clock else [at] * per_tick)
                await self.flush()
                rest = flush_every_s - (time.monotonic() - seg_start - elapsed)
                if rest > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=rest)
            if stop.is_set():
                await self.writer.drain()  # what was held back too: the service publishes it
                if finish:
                    await self.finalize_segment(begin + SEGMENT_INTERVAL - timedelta(seconds=1))
                break
            await self.finalize_segment(begin + SEGMENT_INTERVAL - timedelta(seconds=1))
            log.info("emulate.segment.finalized", begin=begin.isoformat())
            begin += SEGMENT_INTERVAL
        self.summary.live_blobs = len(self.workload.blobs) if self.workload else 0
        return self.summary
