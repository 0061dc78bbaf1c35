"""Retention gaps: a lease whose position points at data the service has deleted.

Azure deletes change feed files older than the retention period. A lease that was stopped (or
slow) for longer finds its chunk or its whole segment gone. `--on-gap` decides: `skip` (the
default) records the gap in the lease (from, to, the error) and continues from the earliest data
still present; `stop` parks the lease, as for other bad data, until an operator moves it.

Where to continue is `position_after_gap`: the first chunk of the shard that still exists after
the missing one in the same segment, else the first later segment whose manifest still exists.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from processor.changefeed.errors import MissingChunkError
from processor.changefeed.position import ShardPosition
from processor.changefeed.storage.layout import shard_name
from processor.reading.lease_position import LeasePosition

if TYPE_CHECKING:
    from processor.changefeed.catalog import FeedCatalog

MANIFEST_NAME = "/meta.json"


class OnGap(enum.Enum):
    SKIP = "skip"
    STOP = "stop"


def first_after(names: list[str], missing: str) -> str | None:
    """The first of the sorted `names` after `missing` (chunk names sort by number)."""
    return next((n for n in names if n > missing), None)


async def position_after_gap(
    catalog: FeedCatalog, shard: str, pos: LeasePosition, error: MissingChunkError
) -> LeasePosition:
    """The earliest position still readable after the data `error` found missing.

    A missing segment manifest marks that segment done, and any following segment whose
    manifest is gone too, so that the next read enters the first one that still exists. A
    missing chunk moves to the next chunk of the shard present in the same segment, or past the
    segment when there is none."""
    if error.path.endswith(MANIFEST_NAME):
        return await _past_missing_segments(catalog, error.path, pos)
    if pos.segment is None:
        return pos
    manifest = await catalog.manifest(pos.segment)
    prefix = next((p for p in manifest.shard_prefixes if shard_name(p) == shard), None)
    if prefix is not None:
        names = [b.name for b in await catalog.storage.list_blobs(prefix)]
        nxt = first_after(names, error.path)
        if nxt is not None:
            return pos.moved_to(pos.segment, False, ShardPosition(nxt, 0, 0))
    return pos.moved_to(pos.segment, True)


async def _past_missing_segments(
    catalog: FeedCatalog, missing: str, pos: LeasePosition
) -> LeasePosition:
    done = missing
    for segment in await catalog.segments(max_age_s=0):
        if segment <= done:
            continue
        try:
            await catalog.manifest(segment)
        except MissingChunkError:
            done = segment
            continue
        break
    return pos.moved_to(done, True)
