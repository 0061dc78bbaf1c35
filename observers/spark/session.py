"""Opening the Spark session a host writes through: embedded local Spark, or Spark Connect."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from observers.errors import PluginLoadError

DEFAULT_MASTER = "local[*]"
DEFAULT_STATE_BUCKETS = 16
DEFAULT_WARM_UP_ROWS = 20_000
DEFAULT_MAX_ROWS = 50_000
DEFAULT_MAX_WAIT_S = 1.0

LOCAL_DEFAULTS = {
    # batches of all leases wait in the driver (the host) until written: 1g (Spark's default)
    # runs out with a few 64 MiB writes in flight
    "spark.driver.memory": "2g",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",  # no progress bars in the logs
    # below this size an Arrow table becomes rows in the driver, on one thread; at 0 every
    # Arrow batch becomes a task: measured 2x faster writes of the change log on 2 cores
    "spark.sql.execution.arrow.localRelationThreshold": "0",
}
"""Settings of the embedded session that `--spark-conf` may change."""

SQL_CONF = {
    "spark.sql.session.timeZone": "UTC",
    # INT96 (Spark's default) reads back as a naive timestamp elsewhere; microseconds since the
    # epoch, marked as UTC, read the same in every Parquet reader
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
}
"""Session settings the tables rely on (applied over Spark Connect too)."""


@dataclass(frozen=True, slots=True)
class SparkOptions:
    output: Path  # the tables' root: output/changes, output/state
    master: str = DEFAULT_MASTER
    remote: str | None = None  # sc://host:port: Spark Connect instead of a local session
    conf: Mapping[str, str] = field(default_factory=dict)  # --spark-conf KEY=VALUE
    max_rows: int = DEFAULT_MAX_ROWS  # rows per Spark write, across the host's leases
    min_rows: int = 5_000  # enough rows to write at once when Spark is idle
    max_bytes: int = 64 << 20  # Arrow bytes per Spark write
    max_wait_s: float = DEFAULT_MAX_WAIT_S  # longest a batch waits for others to share a write
    state_buckets: int = DEFAULT_STATE_BUCKETS  # when the state table is made
    warm_up_rows: int = DEFAULT_WARM_UP_ROWS  # made-up rows written three times at start
    app_name: str = "cfp"

    @property
    def changes(self) -> Path:
        return self.output / "changes"

    @property
    def state(self) -> Path:
        return self.output / "state"

    @property
    def internal(self) -> Path:
        """Our own bookkeeping, beside the tables: `_` keeps it out of Spark's and pyarrow's
        listings of the output folder."""
        return self.output / "_cfp"

    @property
    def staging(self) -> Path:
        return self.internal / "staging"


def output_path(text: str) -> Path:
    """`--output` as a local path. The tables are published with hard links and renames, which
    need a file system the host sees (local, or mounted and shared with the Spark cluster)."""
    if not text:
        raise PluginLoadError("spark", "--output is required with --observer spark")
    parsed = urlparse(text)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else text).resolve()
    raise PluginLoadError(
        "spark",
        f"--output {text}: only local or mounted paths are supported (the tables are published "
        f"with hard links and atomic renames); mount {parsed.scheme}:// storage and give its path",
    )


def spark_conf(pairs: tuple[str, ...]) -> dict[str, str]:
    """`--spark-conf KEY=VALUE` options as a mapping. Errors: `PluginLoadError`."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise PluginLoadError("spark", f"--spark-conf {pair!r}: expected KEY=VALUE")
        if key.strip() == "spark.jars.packages":
            raise PluginLoadError(
                "spark", "--spark-conf spark.jars.packages: nothing may be downloaded at run time"
            )
        out[key.strip()] = value.strip()
    return out


def open_session(options: SparkOptions) -> Any:
    """A SparkSession (blocking: starts a JVM for a local session). Never sets
    `spark.jars.packages`: nothing may be downloaded at run time."""
    from pyspark.sql import SparkSession  # noqa: PLC0415  (slow import, only when used)

    builder = SparkSession.builder.appName(options.app_name)
    if options.remote:
        for key, value in options.conf.items():
            builder = builder.config(key, value)
        session = builder.remote(options.remote).getOrCreate()
    else:
        for key, value in {**LOCAL_DEFAULTS, **options.conf}.items():
            builder = builder.config(key, value)
        session = builder.master(options.master).getOrCreate()
        session.sparkContext.setLogLevel("WARN")
    for key, value in SQL_CONF.items():  # session settings: also apply over Spark Connect
        session.conf.set(key, value)
    return session
