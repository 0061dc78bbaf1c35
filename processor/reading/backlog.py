"""What a lease has left to read, in bytes: the unread part of its current chunk, its later
chunks, and its shard's chunks in later readable segments, from blob sizes alone (`cfp status`,
the host's `cfp_lag_bytes`, and what `cfp lease move` skips)."""

from __future__ import annotations

from processor.changefeed.catalog import FeedCatalog
from processor.changefeed.storage.feed_storage import BlobInfo
from processor.changefeed.storage.layout import shard_name
from processor.reading.barrier import readable_segments
from processor.reading.lease_position import LeasePosition

# Chunk listings of finalized segments, which never change: (segment, shard prefix) -> blobs.
ListingCache = dict[tuple[str, str], list[BlobInfo]]


async def bytes_left(
    catalog: FeedCatalog,
    token: str,
    pos: LeasePosition,
    segments: list[str],
    cache: ListingCache | None = None,
) -> int:
    """Bytes of the lease's shard after `pos`, up to the newest readable segment. With `cache`,
    finalized segments are listed once (a host samples this every few seconds)."""
    total = 0
    for segment in readable_segments(segments, pos):
        if pos.segment is not None and (
            segment < pos.segment or (segment == pos.segment and pos.is_segment_done)
        ):
            continue
        manifest = await catalog.manifest(segment)
        prefix = next((p for p in manifest.shard_prefixes if shard_name(p) == token), None)
        if prefix is None:
            continue
        blobs = None if cache is None else cache.get((segment, prefix))
        if blobs is None:
            blobs = await catalog.storage.list_blobs(prefix)
            if cache is not None and manifest.is_finalized:
                cache[(segment, prefix)] = blobs
        for blob in blobs:
            if segment == pos.segment and pos.shard.chunk is not None:
                if blob.name < pos.shard.chunk:
                    continue
                if blob.name == pos.shard.chunk:
                    total += max(0, blob.size - pos.shard.block_offset)
                    continue
            total += blob.size
    return total
