"""Opening the Spark sessions a host writes through: embedded local Spark, or Spark Connect.

Every session gets Delta Lake (its SQL extension and catalog; the jars through `spark.jars` in
an embedded session, the server's own with Spark Connect), the SQL settings the tables rely on,
and the storage credentials of `--output` as session settings, set after the session is up:
over Spark Connect they travel in the session's gRPC calls, in an embedded session through the
in-process gateway, never on a process command line.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from observers.builtin.spark.session.class_archive import current_archive, with_archive
from observers.builtin.spark.session.jars import SparkJarsError, spark_jars
from observers.builtin.spark.session.liveness import close_quietly, limit_retries
from observers.builtin.spark.session.output import Output, hadoop_settings
from observers.builtin.spark.settings import (
    DEFAULT_HINTS_CONFIRM_WITHIN_S,
    DEFAULT_HINTS_STATE_EVERY_S,
    DEFAULT_MASTER,
    DEFAULT_MAX_ROWS,
    DEFAULT_MAX_WAIT_S,
    DEFAULT_STATE_EVERY_S,
    DEFAULT_WARM_UP_ROWS,
)
from observers.errors import PluginLoadError
from observers.options import StorageAccess

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
# Spark masks the values of settings whose names match this in its logs, UI and event logs: its
# default, plus the ABFS settings that hold account keys, SAS tokens and client secrets
REDACTION_REGEX = (
    r"(?i)secret|password|token|access[.]key|fs[.]azure[.]account[.]key|fs[.]azure[.]sas"
)

# ...and in the options of data sources shown in plans (EXPLAIN) and progress: Spark's default
# (URLs), connection strings, SAS tokens and account keys
OPTIONS_REDACTION_REGEX = r"(?i)url|connectionstring|sas|accountkey|sharedaccesssignature|sig="

DELTA_STATIC = {
    "spark.sql.extensions": DELTA_EXTENSION,
    "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
    "spark.redaction.regex": REDACTION_REGEX,
    "spark.sql.redaction.options.regex": OPTIONS_REDACTION_REGEX,
}
"""Settings a Spark process needs from its start to serve Delta tables (embedded sessions and
`cfp spark-connect` set them; a cluster of your own must too)."""

LOCAL_DEFAULTS = {
    # batches of all leases wait in the driver (the host) until written: 1g (Spark's default)
    # runs out with a few 128 MiB writes in flight
    "spark.driver.memory": "2g",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",  # no progress bars in the logs
    # below this size an Arrow table becomes rows in the driver, on one thread; at 0 every
    # Arrow batch becomes a task: measured 2x faster writes of the change log on 2 cores
    "spark.sql.execution.arrow.localRelationThreshold": "0",
    # ...and an Arrow batch is at most this many rows: a write's appends (one per lease, side by
    # side) measured 25 % faster at 50,000 than at 10,000 (Spark's default) on 2 cores, one
    # big append of 180,000 rows the same
    "spark.sql.execution.arrow.maxRecordsPerBatch": "50000",
    # Delta rebuilds a table's state from its log in this many tasks after every commit it
    # reads; 50 (Delta's default) tiny tasks cost about a second per write on 2 cores
    "spark.databricks.delta.snapshotPartitions": "2",
    # likewise the shuffles of MERGE and of the state job: 200 by default
    "spark.sql.shuffle.partitions": "8",
    # and the listings of files (VACUUM, partition discovery): 10,000 tasks by default, which
    # made a VACUUM of a small table take half a minute on 2 cores
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "8",
}
"""Settings of an embedded session (and of `cfp spark-connect`) that `--spark-conf` may change."""

SQL_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.redaction.options.regex": OPTIONS_REDACTION_REGEX,
    # INT96 (Spark's default) reads back as a naive timestamp elsewhere; microseconds since the
    # epoch, marked as UTC, read the same in every Parquet reader
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # the sources of the state job's MERGEs are versions of Delta tables, which do not change
    # under them: materialising them first (Delta's default for safety against sources that
    # change) is a wasted pass
    "spark.databricks.delta.merge.materializeSource": "none",
    # data skipping on `position` (38 characters) needs statistics longer than Delta's 32
    "spark.databricks.io.skipping.stringPrefixLength": "64",
    # the change log's columns may grow in later versions of cfp: its appends and the state
    # job's MERGEs add them to the tables
    "spark.databricks.delta.schema.autoMerge.enabled": "true",
    # an idempotent write's (txnAppId, txnVersion) is cleared after its commit, so that it can
    # never be applied to the next one by mistake
    "spark.databricks.delta.write.txnVersion.autoReset.enabled": "true",
}
"""Session settings the tables rely on (applied over Spark Connect too)."""


@dataclass(frozen=True, slots=True)
class SparkOptions:
    output: Output  # the tables' root: OUTPUT/changes, OUTPUT/state
    access: StorageAccess | None = None  # the output account's credentials (None: Entra ID)
    feed: StorageAccess | None = None  # the feed's account (its output container is left out)
    master: str = DEFAULT_MASTER
    # sc://host:port of Spark Connect servers (the first that answers), instead of a local session
    remotes: tuple[str, ...] = ()
    conf: Mapping[str, str] = field(default_factory=dict)  # --spark-conf KEY=VALUE
    max_rows: int = DEFAULT_MAX_ROWS  # rows per Spark write, across the host's leases
    min_rows: int = 5_000  # enough rows to write at once when Spark is idle
    max_bytes: int = 192 << 20  # Arrow bytes per Spark write (a change log row: about 1.6 KB)
    max_wait_s: float = DEFAULT_MAX_WAIT_S  # longest a batch waits for others to share a write
    warm_up_rows: int = DEFAULT_WARM_UP_ROWS  # made-up rows written three times at start (0: none)
    state_every_s: float = DEFAULT_STATE_EVERY_S  # between runs of the state job
    keep_history: bool = True  # the state job keeps OUTPUT/history too
    hints: bool = False  # cfp run --hints-queue: OUTPUT/hints, folded into the state
    hints_state_every_s: float = DEFAULT_HINTS_STATE_EVERY_S  # between state runs with hints
    hints_confirm_within_s: float = DEFAULT_HINTS_CONFIRM_WITHIN_S  # a hint unconfirmed longer
    class_archive: bool = True  # an embedded JVM maps this install's class archive, if made
    app_name: str = "cfp"
    wall: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))  # the host's clock

    @property
    def is_remote(self) -> bool:
        """Spark Connect, not an embedded session."""
        return bool(self.remotes)

    @property
    def changes(self) -> str:
        return self.output.changes

    @property
    def state(self) -> str:
        return self.output.state

    @property
    def state_interval_s(self) -> float:
        """How often the state job runs: with hints, often enough for data within seconds."""
        return self.hints_state_every_s if self.hints else self.state_every_s

    @property
    def history(self) -> str | None:
        """The history table, when the state job keeps one."""
        return self.output.history if self.keep_history else None

    def storage_settings(self) -> dict[str, str]:
        return hadoop_settings(self.output, self.access)


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


def embedded_settings(extra: Mapping[str, str], *, class_archive: bool = True) -> dict[str, str]:
    """Launch settings of a Spark process of ours (an embedded session, `cfp spark-connect`):
    the Delta and hadoop-azure jars, Delta's extension and catalog, then `extra`, and the class
    archive when this install has one (`class_archive.py`; False: not, as when making it).
    Errors: `PluginLoadError` when the jars are missing."""
    try:
        jars = spark_jars()
    except SparkJarsError as e:
        raise PluginLoadError("spark", str(e)) from e
    # Python workers (a Python data source's planning and reads) run this interpreter, which
    # has cfp and its dependencies
    python = {"spark.pyspark.python": sys.executable}
    listed = ",".join(str(j) for j in jars)
    settings = {**LOCAL_DEFAULTS, **python, **DELTA_STATIC, "spark.jars": listed, **extra}
    return with_archive(settings, current_archive(jars) if class_archive else None)


def open_session(options: SparkOptions, remote: str | None = None) -> Any:
    """A SparkSession ready for the tables (blocking: starts a JVM for a local session): on the
    Spark Connect server at `remote`, else on the first of `options.remotes` that answers, else
    embedded. Never sets `spark.jars.packages`: nothing may be downloaded at run time.

    Errors: `PluginLoadError` when the jars are missing, or a Spark Connect server lacks Delta;
    the last server's error when none answers.
    """
    from pyspark.sql import SparkSession  # noqa: PLC0415  (slow import, only when used)

    if remote is None and options.is_remote:
        return _first_answering(options)
    if remote is not None:
        session = _connect(remote)
        with _closed_on_error(session):
            _check_server_has_delta(session, remote)
            for key, value in options.conf.items():  # over Connect, session settings only
                session.conf.set(key, value)
            prepare(session, options)
        return session
    builder = SparkSession.builder.appName(options.app_name)
    # the JVM starts the Python workers of a Python data source with PYSPARK_PYTHON, not with
    # `spark.pyspark.python`: this interpreter has cfp and its dependencies
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = embedded_settings(options.conf, class_archive=options.class_archive)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.master(options.master).getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    prepare(session, options)
    return session


def _first_answering(options: SparkOptions) -> Any:
    """A session on the first of `options.remotes` that answers (a command's: `cfp sql`)."""
    error: Exception | None = None
    for remote in options.remotes:
        try:
            return open_session(options, remote)
        except PluginLoadError:
            raise
        except Exception as e:  # no answer: the next one
            error = e
    assert error is not None, "no remote to open"
    raise error


def new_session(session: Any, options: SparkOptions, remote: str | None = None) -> Any:
    """Another session on the same Spark (its own settings and temporary views), prepared like
    the first: for work whose session settings must not leak into the first one's writes."""
    if remote is not None:
        other = _connect(remote)
        with _closed_on_error(other):
            for key, value in options.conf.items():
                other.conf.set(key, value)
            prepare(other, options)
        return other
    other = session.newSession()
    prepare(other, options)
    return other


def _connect(remote: str) -> Any:
    """A new Spark Connect session on `remote` (never the cached one: that may be of a server
    lost since), its retries cut short before its first call: a builder with settings would
    send them at once, retrying a server that does not answer for ten minutes."""
    from pyspark.sql import SparkSession  # noqa: PLC0415

    session = SparkSession.builder.remote(remote).create()
    limit_retries(session)
    return session


@contextlib.contextmanager
def _closed_on_error(session: Any) -> Iterator[None]:
    """A Connect session that failed to open is closed: each one holds a gRPC channel that
    keeps trying its server, and a host trying servers for an hour makes hundreds."""
    try:
        yield
    except BaseException:
        close_quietly(session)
        raise


def prepare(session: Any, options: SparkOptions) -> None:
    """The session settings every session of ours has: SQL settings, then the credentials."""
    for key, value in {**SQL_CONF, **options.storage_settings()}.items():
        session.conf.set(key, value)


def _check_server_has_delta(session: Any, remote: str) -> None:
    extensions = str(session.conf.get("spark.sql.extensions", "") or "")
    if DELTA_EXTENSION not in extensions:
        raise PluginLoadError(
            "spark",
            f"the Spark Connect server at {remote} has no Delta Lake (its spark.sql.extensions "
            f"lacks {DELTA_EXTENSION}): start it with `cfp spark-connect`, or give it the jars "
            "of deploy/spark/pom.xml with spark.jars and Delta's extension and catalog",
        )
