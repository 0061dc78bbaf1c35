"""What the feed holds now: its consumable segments and their manifests, shared by a host's workers.

Every worker of a host asks the same questions (which segments are consumable, what shards does
this segment have); the catalog answers them from one look per refresh interval and caches
finalized manifests for good (they never change), so a host's storage traffic for metadata does
not grow with the number of leases it owns. A look reads `segments.json` and lists the segment
folders only when its `lastConsumable` moved: on a quiet feed, one request.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from processor.changefeed.errors import FeedCorrupt, MissingChunkError
from processor.changefeed.position import ShardPosition
from processor.changefeed.selection import TimeRange, consumable_segments
from processor.changefeed.storage.feed_storage import FeedStorage
from processor.changefeed.storage.layout import (
    SEGMENT_PREFIX,
    SEGMENTS_JSON,
    is_segment_path,
    shard_name,
)
from processor.changefeed.storage.manifests import (
    SegmentManifest,
    parse_feed_manifest,
    parse_segment_manifest,
)
from processor.clock import Clock, SystemClock

MANIFEST_CACHE = 4096
_UNLISTED = object()  # no listing stands for the current lastConsumable


async def list_segment_paths(storage: FeedStorage, *, after: str | None = None) -> list[str]:
    """Every segment manifest path in the feed (from the year of `after` on, when given)."""
    years = await storage.list_folders(SEGMENT_PREFIX)
    if after is not None:
        years = [y for y in years if y >= after[: len(SEGMENT_PREFIX) + 5]]
    paths: list[str] = []
    for year in years:
        paths.extend(b.name for b in await storage.list_blobs(year) if is_segment_path(b.name))
    return paths


class FeedCatalog:
    def __init__(
        self, storage: FeedStorage, *, refresh_s: float, clock: Clock | None = None
    ) -> None:
        self.storage = storage
        self.refresh_s = refresh_s
        self._clock = clock or SystemClock()
        self._segments: list[str] = []
        self._listed_at: float | None = None
        self._last_consumable: object = _UNLISTED  # as of the last listing
        self._lock = asyncio.Lock()
        self._finalized: OrderedDict[str, SegmentManifest] = OrderedDict()

    async def segments(self, *, max_age_s: float | None = None) -> list[str]:
        """Consumable segment paths, oldest first, from a listing at most `max_age_s` old."""
        age = self.refresh_s if max_age_s is None else max_age_s
        async with self._lock:
            now = self._clock.monotonic()
            if self._listed_at is None or now - self._listed_at >= age:
                self._segments = await self._list()
                self._listed_at = self._clock.monotonic()
            return self._segments

    async def _list(self) -> list[str]:
        doc = await self.storage.read_document(SEGMENTS_JSON)
        if doc is None:
            self._last_consumable = _UNLISTED  # when it is back, list again
            return []
        feed = parse_feed_manifest(doc, path=SEGMENTS_JSON)
        if feed.last_consumable == self._last_consumable:
            # nothing new is consumable before lastConsumable moves: one request, no listing
            return self._segments
        after = self._segments[-1] if self._segments else None
        listed = consumable_segments(
            [*self._segments, *await list_segment_paths(self.storage, after=after)],
            last_consumable=feed.last_consumable,
            after=None,
            include_after=True,
            window=TimeRange(),
        )
        self._last_consumable = feed.last_consumable  # once listed: a failed listing is retried
        return listed

    async def manifest(self, path: str) -> SegmentManifest:
        """The segment's manifest; re-read each time until it is finalized."""
        cached = self._finalized.get(path)
        if cached is not None:
            return cached
        raw = await self.storage.read_document(path)
        if raw is None:
            raise MissingChunkError(path, "segment manifest is gone (retention?)")
        manifest = parse_segment_manifest(raw, path=path)
        if manifest.is_finalized:
            self._finalized[path] = manifest
            while len(self._finalized) > MANIFEST_CACHE:
                self._finalized.popitem(last=False)
        return manifest

    async def shard_ends(self, segment: str) -> dict[str, ShardPosition]:
        """Where each shard of `segment` ends now: its last chunk at that chunk's size (a shard
        without chunks is left out). What a finished segment's position is, shard by shard."""
        manifest = await self.manifest(segment)
        ends: dict[str, ShardPosition] = {}
        for prefix in manifest.shard_prefixes:
            chunks = [b for b in await self.storage.list_blobs(prefix) if b.name.endswith(".avro")]
            if chunks:
                ends[prefix] = ShardPosition(chunks[-1].name, chunks[-1].size, 0)
        return ends

    async def shard_names(
        self, segments: list[str], *, bad: dict[str, FeedCorrupt] | None = None
    ) -> set[str]:
        """Every shard name appearing in the readable manifests of `segments`. A manifest that
        cannot be read is left out (and reported in `bad`, by path): the leases that reach it
        stop in front of it, while every other shard still gets its lease."""
        names: set[str] = set()
        for path in segments:
            try:
                manifest = await self.manifest(path)
            except FeedCorrupt as e:
                if bad is not None:
                    bad[path] = e
                continue
            names.update(shard_name(p) for p in manifest.shard_prefixes)
        return names
