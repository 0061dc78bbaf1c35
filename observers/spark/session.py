"""Opening the Spark session a host writes through: embedded local Spark, or Spark Connect."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from observers.errors import PluginLoadError

DEFAULT_MASTER = "local[*]"


@dataclass(frozen=True, slots=True)
class SparkOptions:
    output: Path  # the tables' root: output/changes, output/state
    master: str = DEFAULT_MASTER
    remote: str | None = None  # sc://host:port: Spark Connect instead of a local session
    max_rows: int = 200_000  # rows per Spark write, across the host's leases
    max_wait_s: float = 1.0  # longest a batch waits for others to share its write
    app_name: str = "cfp"

    @property
    def changes(self) -> Path:
        return self.output / "changes"

    @property
    def staging(self) -> Path:
        return self.output / "_staging"


def output_path(text: str) -> Path:
    """`--output` as a local path. The change log is published with hard links, which needs a
    file system the host sees (local, or mounted and shared with the Spark cluster)."""
    if not text:
        raise PluginLoadError("spark", "--output is required with --observer spark")
    parsed = urlparse(text)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else text).resolve()
    raise PluginLoadError(
        "spark",
        f"--output {text}: only local or mounted paths are supported (the change log is "
        f"published with hard links); mount {parsed.scheme}:// storage and give its path",
    )


def open_session(options: SparkOptions) -> object:
    """A SparkSession (blocking: starts a JVM for a local session). Never sets
    `spark.jars.packages`: nothing may be downloaded at run time."""
    from pyspark.sql import SparkSession  # noqa: PLC0415  (slow import, only when used)

    builder = SparkSession.builder.appName(options.app_name)
    if options.remote:
        session = builder.remote(options.remote).getOrCreate()
    else:
        session = (
            builder.master(options.master)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")  # no progress bars in the logs
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("WARN")
    for key, value in SQL_CONF.items():  # session settings: also apply over Spark Connect
        session.conf.set(key, value)
    return session


SQL_CONF = {
    "spark.sql.session.timeZone": "UTC",
    # INT96 (Spark's default) reads back as a naive timestamp elsewhere; microseconds since the
    # epoch, marked as UTC, read the same in every Parquet reader
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
}
