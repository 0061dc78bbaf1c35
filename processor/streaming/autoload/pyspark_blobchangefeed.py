"""Found by Spark itself: a top-level module named `pyspark_*` with a `DefaultSource` on the
Python path of a Spark process is registered in every session of it. `cfp spark-connect` puts
this folder on its server's path, so that any client, cfp installed or not, can read
`format("blobchangefeed")`."""

from processor.streaming.source import BlobChangeFeedSource as DefaultSource

__all__ = ["DefaultSource"]
