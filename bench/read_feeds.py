"""The feeds `bench/read_throughput.py` reads, each built once in an Azurite of its own under
`.bench/` and reused while its marker matches.

  small  blob operations as `cfp emulate --feed-only` writes them: schema version 5, blocks of
         1-60 events, 4 MiB chunks, 5 segments of 4, 3, 5, 2 and 4 shards;
  large  the very same records re-blocked into blocks of 500-2,000 events;
  mixed  a feed shaped like a real account's over a few hours: 8 segments of 4 shards whose
         schema versions change (1, 4, 5, then 6, a version newer than the SDKs know, with fields
         and event types they do not), blocks of 1-60 events, a Control record in every 34
         (about 3 %), one chunk per shard (32 chunks).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from pathlib import Path

from azure.storage.blob.aio import BlobServiceClient

from processor.changefeed.feed_reader import FeedReader
from processor.changefeed.selection import EventFilter
from processor.changefeed.storage.feed_storage import FeedStorage
from processor.changefeed.storage.layout import CONTAINER, segment_time, shard_name
from processor.emulator.emulator import Emulator, EmulatorConfig
from processor.emulator.feed_writer import FeedWriter
from processor.emulator.service import reset_account

ROOT = Path(__file__).resolve().parent.parent
WORKDIR = ROOT / ".bench"
SHARDS = (4, 3, 5, 2, 4)
MIXED_VERSIONS = (1, 4, 5, 6)


@dataclass(frozen=True)
class Profile:
    name: str
    blocks: tuple[int, int]
    summary: str


PROFILES = {
    "small": Profile("small", (1, 60), "schema 5, blocks of 1-60 events"),
    "large": Profile("large", (500, 2000), "schema 5, blocks of 500-2000 events"),
    "mixed": Profile("mixed", (1, 60), "schemas 1, 4, 5, 6, ~3 % control, blocks of 1-60"),
}


def feed_config(events: int) -> EmulatorConfig:
    """The small profile's feed (`filter_cost` reads it too)."""
    return EmulatorConfig(
        seed=2026,
        segments=len(SHARDS),
        events_per_segment=events // len(SHARDS),
        shards=SHARDS,
        schema_version=5,
        block_events=PROFILES["small"].blocks,
        chunk_bytes=4 << 20,
        containers=4,
        blobs_per_container=2000,
        concurrency=64,
        feed_only=True,  # the feed these operations give; the readers never look at blobs
    )


def mixed_configs(events: int) -> list[EmulatorConfig]:
    """One emulator run per schema version, two segments each, one after the other."""
    per_segment = events // (2 * len(MIXED_VERSIONS))
    base = replace(
        feed_config(events),
        seed=2027,
        segments=2,
        events_per_segment=per_segment,
        shards=(4,),
        chunk_bytes=8 << 20,  # one chunk per shard
        control_every=33,
    )
    return [
        replace(base, seed=base.seed + i, schema_version=v) for i, v in enumerate(MIXED_VERSIONS)
    ]


def small_marker(events: int) -> dict[str, object]:
    """What the small feed's marker says of it (the large one is its copy)."""
    return {"events": events, "shards": list(SHARDS), "seed": 2026, "version": 3}


def mixed_marker(events: int) -> dict[str, object]:
    return {"events": events, "versions": list(MIXED_VERSIONS), "seed": 2027, "version": 1}


def marker_ok(marker: Path, want: dict[str, object]) -> bool:
    return marker.exists() and json.loads(marker.read_text()) == want


async def build_small(conn: str, config: EmulatorConfig) -> None:
    async with BlobServiceClient.from_connection_string(conn) as service:
        emulator = Emulator(service, config)
        await reset_account(service, emulator.containers)
        await emulator.run_batch()


async def build_mixed(conn: str, events: int) -> None:
    """Each version's run continues the feed after the segments of the one before."""
    configs = mixed_configs(events)
    async with BlobServiceClient.from_connection_string(conn) as service:
        await reset_account(service, Emulator(service, configs[0]).containers)
        for config in configs:
            await Emulator(service, config).run_batch()


async def relayout(src: str, dst: str, block_events: tuple[int, int]) -> None:
    """Copy every record of `src`'s feed into `dst`'s, same segments and shards, new blocks."""
    async with (
        FeedStorage.from_connection_string(src) as storage,
        BlobServiceClient.from_connection_string(dst) as service,
    ):
        await reset_account(service, [])
        writer = FeedWriter(
            service.get_container_client(CONTAINER),
            rng=random.Random(1),
            block_events=block_events,
            chunk_bytes=16 << 20,
        )
        await writer.ensure_feed()
        reader = FeedReader(storage, event_filter=EventFilter(include_control=True))
        current: str | None = None
        async for batch in reader.batches():  # read to the end: nothing is left open
            if batch.segment != current:
                if current is not None:
                    await writer.finalize_segment()
                current = batch.segment
                raw = await storage.read_document(batch.segment)
                assert raw is not None
                shards = len(json.loads(raw)["chunkFilePaths"])
                await writer.begin_segment(segment_time(current), shards=shards, schema_version=5)
            shard = int(shard_name(batch.shard))
            for record in batch.records:
                await writer.add(shard, record)
        if current is not None:
            await writer.finalize_segment()
