"""Reading one partition of the initial scan: the account's blobs as backfill events.

`cfp run --initial-scan` makes `--scan-partitions` scan leases. Each lists every container (not
`$`-prefixed) page by page in name order and delivers the blobs whose `scan_partition` is its
own, each as one record shaped like a change feed record (`eventType` `BlobBackfill`, the blob's
properties in `data`, its last-modified time as `eventTime`, an empty sequencer so that every
change of the blob sorts after it). The position is the last blob delivered, so a partition
resumes after it; the same blob version always gets the same event id (at-least-once, dedup on
it). Each partition lists the whole account: listing costs one request per 5,000 names.
"""

from __future__ import annotations

import asyncio
import uuid
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from azure.storage.blob import BlobProperties

from observers.envelope import BACKFILL_EVENT, SCAN_SEGMENT_PREFIX
from processor.changefeed.change_filter import ChangeFilter
from processor.changefeed.decoding.decode import RawRecord
from processor.changefeed.shard_batch import DEFAULT_BATCH_EVENTS
from processor.changefeed.storage.feed_storage import FeedStorage
from processor.reading.lease_batch import LeaseBatch
from processor.reading.lease_position import LeasePosition, ScanPosition
from processor.reading.lease_reader import LeaseRead, Step

_IDS = uuid.UUID("5f1d3c1e-4b7a-4c0e-9a43-0c2f6d7e8b91")  # namespace of backfill event ids


def scan_partition(container: str, blob: str, partitions: int) -> int:
    """The scan partition of a blob: a stable hash of its path."""
    return zlib.crc32(f"{container}/{blob}".encode()) % partitions


def scan_event_position(container: str, blob: str) -> str:
    """The `position` of a backfill event: sorts like the listing (containers have no spaces,
    and a space sorts below every character a container name may hold); the leading `~` sets it
    apart from a change feed event's position, which begins with a digit."""
    return f"~{container} {blob}"


def scan_segment(position: ScanPosition) -> str:
    """What stands in for the segment of a backfill event: the scan and its start time."""
    return f"{SCAN_SEGMENT_PREFIX}{position.started_at.isoformat()}"


def backfill_record(container: str, blob: BlobProperties) -> RawRecord:
    """A listed blob as a change feed record of type `BlobBackfill`."""
    etag = (blob.etag or "").strip('"')
    settings = blob.content_settings
    data: dict[str, object] = {
        "api": "ListBlobs",
        "etag": etag,
        "contentType": settings.content_type if settings is not None else None,
        "contentLength": blob.size,
        "blobType": _text(blob.blob_type),
        "blobTier": _text(blob.blob_tier),
        "blobVersion": blob.version_id,
        "sequencer": "",
        "snapshot": blob.snapshot,
        "blobTagsUpdated": {"current": dict(blob.tags)} if blob.tags else None,
    }
    last_modified = blob.last_modified
    return {
        "subject": f"/blobServices/default/containers/{container}/blobs/{blob.name}",
        "eventType": BACKFILL_EVENT,
        "eventTime": last_modified.isoformat() if last_modified is not None else None,
        "id": str(uuid.uuid5(_IDS, f"{container}/{blob.name}@{etag}")),
        "data": data,
    }


def _text(value: object) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))


@dataclass(slots=True)
class ScanReader:
    """Same contract as `LeaseReader` (`read`, `reset`, `position`); never blocked."""

    storage: FeedStorage
    position: LeasePosition
    batch_events: int = DEFAULT_BATCH_EVENTS
    change: ChangeFilter = field(default_factory=ChangeFilter)  # the processor's filter
    _containers: list[str] | None = None
    _marker: str | None = None  # of the next page of the current container
    _page: deque[BlobProperties] = field(default_factory=deque)
    _container: str | None = None
    _listed_to_end: bool = False  # the current container has no more pages

    def bad_data_ahead(self) -> None:
        return None  # a listing has no bytes to be bad

    def reset(self) -> None:
        self._containers, self._page, self._container = None, deque(), None
        self._marker, self._listed_to_end = None, False

    async def read(
        self,
        *,
        may_enter: Callable[[str, list[str]], bool] | None = None,
        read_ahead: asyncio.TaskGroup | None = None,
        max_age_s: float | None = None,
    ) -> LeaseRead:
        scan = self.position.scan
        assert scan is not None, "not a scan lease"
        if scan.done:
            return LeaseRead(Step.CAUGHT_UP, self.position)
        records: list[RawRecord] = []
        keys: list[str] = []
        after = scan.after
        while len(records) < self.batch_events:
            blob = await self._next_blob(scan)
            if blob is None:
                break
            container, props = blob
            if scan_partition(container, props.name, scan.partitions) != scan.partition:
                continue
            if not self.change.accepts_blob(container, props.name):
                continue
            if self.change.blob_types and _text(props.blob_type) not in self.change.blob_types:
                continue
            records.append(backfill_record(container, props))
            keys.append(scan_event_position(container, props.name))
            after = (container, props.name)
        if not records:
            self.position = _with_scan(self.position, scan, after, done=True)
            return LeaseRead(Step.ADVANCED, self.position)
        self.position = _with_scan(self.position, scan, after, done=False)
        batch = LeaseBatch.of_records(scan_segment(scan), records, keys)
        return LeaseRead(Step.BATCH, self.position, batch=batch)

    async def _next_blob(self, scan: ScanPosition) -> tuple[str, BlobProperties] | None:
        """The next listed blob after the position (every partition's), or None at the end."""
        if self._containers is None:
            start = scan.after[0] if scan.after else ""
            self._containers = [
                c
                for c in await self.storage.list_containers()
                if c >= start and self.change.accepts_container(c)
            ]
        while True:
            while self._page:
                props = self._page.popleft()
                assert self._container is not None
                if scan.after is None or (self._container, props.name) > scan.after:
                    return self._container, props
            if self._container is not None and not self._listed_to_end:
                page, self._marker = await self.storage.list_blob_page(
                    self._container, self._marker
                )
                self._page, self._listed_to_end = deque(page), self._marker is None
                continue
            if not self._containers:
                return None
            self._container, self._marker, self._listed_to_end = (
                self._containers.pop(0),
                None,
                False,
            )


def _with_scan(
    position: LeasePosition, scan: ScanPosition, after: tuple[str, str] | None, *, done: bool
) -> LeasePosition:
    return LeasePosition(
        scan=ScanPosition(scan.partition, scan.partitions, scan.started_at, after, done),
        start_time=position.start_time,
    )
