"""Registering the source with a Spark session: `cfp sql` does with its own, a `cfp spark-connect`
server knows it in every session, and so can yours."""

from __future__ import annotations

from typing import Any


def register(session: Any) -> None:
    """Make `format("blobchangefeed")` known to `session` (embedded or Spark Connect; over
    Connect the class travels by reference: the server needs cfp installed). Sessions of one
    Spark share their registrations: a second registration is a no-op."""
    from processor.streaming.source import BlobChangeFeedSource  # noqa: PLC0415 - loads pyspark

    try:
        session.dataSource.register(BlobChangeFeedSource)
    except Exception as e:  # Spark's AnalysisException, classic or Connect
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(e):
            raise


def offer(session: Any) -> None:
    """`register`, for a session cfp opens for other work (`cfp sql`): a Spark that cannot take
    the source is told in a warning, and the work goes on."""
    try:
        register(session)
    except Exception as e:
        import structlog  # noqa: PLC0415 - `cfp --help` loads this module, not structlog

        structlog.get_logger("cfp.stream").warning(
            "spark.source_unavailable", error=f"{type(e).__name__}: {e}"
        )
