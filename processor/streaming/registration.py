"""Registering the source with a Spark session: every session cfp opens does, and so can yours."""

from __future__ import annotations

from typing import Any


def register(session: Any) -> None:
    """Make `format("blobchangefeed")` known to `session` (embedded or Spark Connect; over
    Connect the class travels by reference: the server needs cfp installed)."""
    from processor.streaming.source import BlobChangeFeedSource  # noqa: PLC0415 - loads pyspark

    session.dataSource.register(BlobChangeFeedSource)
