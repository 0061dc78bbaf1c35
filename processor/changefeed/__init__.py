"""The Blob change feed, read: the whole feed in order (`feed_reader`), one shard of one
segment (`shard_reader`, over `windows` of whole blocks that `window_fetcher` downloads, cut
into `shard_batch`es), positions and continuation tokens (`position`, `sdk_token`), which
segments and events to deliver (`selection`, `change_filter`), and its typed errors. Its parts:
`storage` (the container, its layout and manifests) and `decoding` (Avro blocks into Arrow
columns).
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.changefeed.catalog import FeedCatalog
    from processor.changefeed.change_filter import ChangeFilter, FilterError
    from processor.changefeed.errors import (
        ChunkError,
        FeedError,
        FeedUnavailable,
        InvalidContinuation,
    )
    from processor.changefeed.feed_reader import FeedReader
    from processor.changefeed.position import FeedPosition, ShardPosition
    from processor.changefeed.sdk_token import from_sdk_token, to_sdk_token
    from processor.changefeed.selection import EventFilter, TimeRange, parse_event_time
    from processor.changefeed.shard_batch import ShardBatch
    from processor.changefeed.shard_reader import ShardReader

__getattr__ = exports(__name__)
__all__ = [
    "ChangeFilter",
    "ChunkError",
    "EventFilter",
    "FeedCatalog",
    "FeedError",
    "FeedPosition",
    "FeedReader",
    "FeedUnavailable",
    "FilterError",
    "InvalidContinuation",
    "ShardBatch",
    "ShardPosition",
    "ShardReader",
    "TimeRange",
    "from_sdk_token",
    "parse_event_time",
    "to_sdk_token",
]
