"""The `$blobchangefeed` container: its only door to Azure Storage (`feed_storage`, with
retries and typed errors), the names and paths in it and the checks on paths read from manifests
(`layout`), and its two JSON documents (`manifests`).
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.changefeed.storage.feed_storage import BlobInfo, FeedStorage
    from processor.changefeed.storage.layout import CONTAINER, chunk_path, segment_path, shard_name
    from processor.changefeed.storage.manifests import (
        FeedManifest,
        SegmentManifest,
        parse_feed_manifest,
        parse_segment_manifest,
    )

__getattr__ = exports(__name__)
__all__ = [
    "CONTAINER",
    "BlobInfo",
    "FeedManifest",
    "FeedStorage",
    "SegmentManifest",
    "chunk_path",
    "parse_feed_manifest",
    "parse_segment_manifest",
    "segment_path",
    "shard_name",
]
