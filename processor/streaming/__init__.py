"""The change feed as a Spark Structured Streaming source (`format("blobchangefeed")`).

`offsets` and `planning` are pure: what an offset holds and which chunk ranges lie between two
of them. `feed_view` is the driver's look at the feed (one catalog look per micro-batch),
`range_reader` the executors' read of one chunk range into change log rows, and `source` the
`pyspark.sql.datasource` classes that wire them. Nothing here knows of hosts or leases.
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.streaming.registration import offer, register
    from processor.streaming.source import BlobChangeFeedSource

__getattr__ = exports(__name__)
__all__ = ["BlobChangeFeedSource", "offer", "register"]
