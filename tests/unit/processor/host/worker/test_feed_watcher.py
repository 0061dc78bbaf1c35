"""The host's feed watcher wakes caught-up workers when, and only when, the consumable
segments change; its catalog reads segments.json alone while lastConsumable stands still."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.errors import FeedUnavailable
from processor.changefeed.storage.layout import SEGMENTS_JSON
from processor.host.worker.feed_watcher import FeedWatcher
from tests import patience


async def until(done: Any) -> None:
    deadline = patience.deadline()
    while not done():
        assert time.monotonic() < deadline, "never happened"
        await asyncio.sleep(0.01)


class Storage:
    """`segments.json` and the segment folders, counting what is asked."""

    def __init__(self) -> None:
        self.last = "2026-01-01T00:00:00Z"
        self.segments = ["idx/segments/2026/01/01/0000/meta.json"]
        self.asked: list[str] = []

    async def read_document(self, path: str) -> bytes:
        assert path == SEGMENTS_JSON
        self.asked.append("segments.json")
        return f'{{"version":0,"lastConsumable":"{self.last}"}}'.encode()

    async def list_folders(self, prefix: str) -> list[str]:
        self.asked.append("folders")
        return ["idx/segments/2026/"]

    async def list_blobs(self, prefix: str) -> list[Any]:
        self.asked.append("blobs")
        return [type("Blob", (), {"name": s, "size": 1})() for s in self.segments]


async def test_caught_up_workers_wake_on_a_new_segment_only() -> None:
    storage = Storage()
    watcher = FeedWatcher(FeedCatalog(storage, refresh_s=3600), every_s=0.01)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    first = watcher.changed()
    await until(lambda: watcher.looks >= 5)
    assert not first.is_set()
    assert storage.asked.count("folders") == 1  # listed once; since then segments.json only
    storage.segments.append("idx/segments/2026/01/01/0100/meta.json")
    storage.last = "2026-01-01T01:00:00Z"
    await asyncio.wait_for(first.wait(), timeout=patience.left_s())
    assert watcher.changed() is not first  # a fresh event for the next change
    assert storage.asked.count("folders") == 2
    stop.set()
    await task


async def test_a_failed_listing_is_tried_again_at_the_next_look() -> None:
    """lastConsumable moved but listing the segments failed: the next look must list again,
    not take the unchanged lastConsumable for "nothing new" (the segment would stay unseen
    until lastConsumable moved again, an hour later)."""

    class Failing(Storage):
        fail = False

        async def list_folders(self, prefix: str) -> list[str]:
            if self.fail:
                self.fail = False
                raise FeedUnavailable("idx/segments/: ServerTimeout")
            return await super().list_folders(prefix)

    storage = Failing()
    catalog = FeedCatalog(storage, refresh_s=3600)  # type: ignore[arg-type]
    assert len(await catalog.segments(max_age_s=0)) == 1
    storage.segments.append("idx/segments/2026/01/01/0100/meta.json")
    storage.last, storage.fail = "2026-01-01T01:00:00Z", True
    with pytest.raises(FeedUnavailable):
        await catalog.segments(max_age_s=0)
    assert len(await catalog.segments(max_age_s=0)) == 2


async def test_a_missing_segments_json_is_listed_again_when_it_is_back() -> None:
    class Flickering(Storage):
        gone = False

        async def read_document(self, path: str) -> bytes | None:  # type: ignore[override]
            return None if self.gone else await super().read_document(path)

    storage = Flickering()
    catalog = FeedCatalog(storage, refresh_s=3600)  # type: ignore[arg-type]
    assert len(await catalog.segments(max_age_s=0)) == 1
    storage.gone = True
    assert await catalog.segments(max_age_s=0) == []
    storage.gone = False
    assert len(await catalog.segments(max_age_s=0)) == 1
