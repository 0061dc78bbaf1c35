"""`cfp run`'s options, grouped by concern (the groups of `cfp run --help`). What they make is
in host_settings.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import click

from leases import LoadRule
from leases.policy.timings import (
    DEFAULT_EXPIRY_S,
    DEFAULT_POLL_S,
    DEFAULT_STUCK_AFTER_S,
)
from leases.store.table_settings import DEFAULT_LEASE_PARTITIONS, MAX_LEASE_PARTITIONS
from observers.builtin.spark.settings import (
    DEFAULT_MAX_ROWS,
    DEFAULT_MAX_WAIT_S,
    DEFAULT_STATE_EVERY_S,
    DEFAULT_WARM_UP_ROWS,
)
from processor.changefeed.shard_batch import DEFAULT_BATCH_EVENTS
from processor.cli.common import (
    PROCESSOR_OPTIONS,
    IsoTime,
    Options,
    decode_deadline_option,
    filter_options,
    format_option,
    output_connection_option,
    spark_conf_option,
    spark_master_option,
    spark_remote_option,
)
from processor.cli.run.host_settings import RunOptions
from processor.host.host_config import (
    DEFAULT_DRAIN_S,
    DEFAULT_HTTP_HOST,
    DEFAULT_HTTP_PORT,
    DEFAULT_OBSERVER_ATTEMPTS,
    DEFAULT_SCAN_PARTITIONS,
    OnObserverError,
)
from processor.plugins.observer_calls import DEFAULT_OBSERVER_THREADS
from processor.reading.retention_gaps import OnGap
from processor.redact import register_connection_string

# which processor, in which lease table, as which host
WHERE_OPTIONS: Options = (
    *PROCESSOR_OPTIONS,
    click.option(
        "--host-name",
        envvar="CFP_HOST_NAME",
        help=(
            "This host's identity in the lease table (default: host name, pid and a random "
            "suffix; must be unique)."
        ),
    ),
)
# leases and balancing
LEASE_OPTIONS: Options = (
    click.option(
        "--lease-expiration",
        envvar="CFP_LEASE_EXPIRATION",
        type=click.FloatRange(min=0.5),
        default=DEFAULT_EXPIRY_S,
        show_default=True,
        help="Seconds without a visible renewal after which other hosts may take a lease.",
    ),
    click.option(
        "--renew-interval",
        envvar="CFP_RENEW_INTERVAL",
        type=click.FloatRange(min=0.05),
        help="Seconds between renewals (default: a third of --lease-expiration).",
    ),
    click.option(
        "--acquire-interval",
        envvar="CFP_ACQUIRE_INTERVAL",
        type=click.FloatRange(min=0.05),
        help="Seconds between balancing ticks, +/-20% jitter (default: a third of the expiration).",
    ),
    click.option(
        "--lease-partitions",
        envvar="CFP_LEASE_PARTITIONS",
        type=click.IntRange(min=1, max=MAX_LEASE_PARTITIONS),
        default=DEFAULT_LEASE_PARTITIONS,
        show_default=True,
        help="For a processor created now: table partitions its leases are spread over (each "
        "serves ~2,000 entities/s). Fixed at creation; an existing processor keeps its own.",
    ),
    click.option(
        "--balance-by",
        envvar="CFP_BALANCE_BY",
        type=click.Choice(["count", "load"]),
        default="count",
        show_default=True,
        help="What hosts even out: their number of leases, or their read rate (bytes/s of the "
        "change feed, written with each renewal). Every host of a processor should use the same.",
    ),
    click.option(
        "--load-tolerance",
        envvar="CFP_LOAD_TOLERANCE",
        type=click.FloatRange(min=0.05, max=0.9),
        default=LoadRule().tolerance,
        show_default=True,
        help="With --balance-by load: leases move only once a host carries more than (1 + this) "
        "or less than (1 - this) times its fair share of the read rate.",
    ),
)
# what is read and how: polling, batches, the filter and the end time (the processor's
# identity), where new leases start, when the host stops
READING_OPTIONS: Options = (
    click.option(
        "--poll-interval",
        envvar="CFP_POLL_INTERVAL",
        type=click.FloatRange(min=0.05),
        default=DEFAULT_POLL_S,
        show_default=True,
        help="Seconds between looks for new data once a lease is caught up.",
    ),
    decode_deadline_option("CFP_DECODE_DEADLINE"),
    click.option(
        "--max-batch-events",
        envvar="CFP_MAX_BATCH_EVENTS",
        type=click.IntRange(min=1, max=100_000),
        default=DEFAULT_BATCH_EVENTS,
        show_default=True,
        help="Most events handed to an observer at once.",
    ),
    *filter_options(env=True),
    click.option(
        "--start-time",
        envvar="CFP_START_TIME",
        type=IsoTime(),
        help="For leases created now: deliver only events at or after this time.",
    ),
    click.option(
        "--start-from-now",
        envvar="CFP_START_FROM_NOW",
        is_flag=True,
        help="For leases created now: deliver only events from now on.",
    ),
    click.option(
        "--end-time",
        envvar="CFP_END_TIME",
        type=IsoTime(),
        help="Deliver only events before this time; each lease then finishes there (part of the "
        "processor's identity, like the filter).",
    ),
    click.option(
        "--initial-scan",
        envvar="CFP_INITIAL_SCAN",
        is_flag=True,
        help="For a processor without leases: first deliver every existing blob once as a backfill "
        "event, then follow the feed from the scan's start minus one hour.",
    ),
    click.option(
        "--scan-partitions",
        envvar="CFP_SCAN_PARTITIONS",
        type=click.IntRange(min=1, max=256),
        default=DEFAULT_SCAN_PARTITIONS,
        show_default=True,
        help="--initial-scan: leases the scan is split into (spread over hosts like the feed's).",
    ),
    click.option(
        "--until-caught-up",
        envvar="CFP_UNTIL_CAUGHT_UP",
        is_flag=True,
        help="Exit 0 once every lease has delivered everything up to lastConsumable.",
    ),
    click.option(
        "--unordered",
        envvar="CFP_UNORDERED",
        is_flag=True,
        help="Drop the segment barrier: faster catch-up, no per-blob order across segments.",
    ),
)
# what receives the batches, and what a batch it keeps failing on does to its lease
DELIVERY_OPTIONS: Options = (
    click.option(
        "--observer",
        envvar="CFP_OBSERVER",
        default="log",
        show_default=True,
        help="log, jsonl:DIR, spark, or module:Name (a class or zero-argument factory).",
    ),
    format_option(
        "CFP_FORMAT",
        "--observer jsonl:DIR: the JSON shape of its lines (the record with who delivered it, the "
        "normalised envelope, a Debezium change event, or a YDB changefeed record).",
    ),
    click.option(
        "--on-observer-error",
        envvar="CFP_ON_OBSERVER_ERROR",
        type=click.Choice([p.value for p in OnObserverError]),
        default=OnObserverError.RETRY.value,
        show_default=True,
        help="A batch the observer keeps failing on: retry it for ever, stop the lease (parked "
        "until `cfp lease resume/move`), or write it to --dead-letter-dir and go on.",
    ),
    click.option(
        "--on-gap",
        envvar="CFP_ON_GAP",
        type=click.Choice([g.value for g in OnGap]),
        default=OnGap.SKIP.value,
        show_default=True,
        help="A lease's data deleted by retention before it was read: record the gap in the lease "
        "and go on from the earliest data still present, or stop the lease (parked).",
    ),
    click.option(
        "--observer-option",
        "observer_options",
        envvar="CFP_OBSERVER_OPTIONS",
        multiple=True,
        metavar="KEY=VALUE",
        help=(
            "An option of the observer --observer names (one that declares `Options`), "
            "repeated for each; checked and typed before any lease is taken."
        ),
    ),
    click.option(
        "--observer-attempts",
        envvar="CFP_OBSERVER_ATTEMPTS",
        type=click.IntRange(min=1),
        default=DEFAULT_OBSERVER_ATTEMPTS,
        show_default=True,
        help="Attempts of one batch before `stop` or `dead-letter` gives up on it.",
    ),
    click.option(
        "--observer-threads",
        envvar="CFP_OBSERVER_THREADS",
        type=click.IntRange(min=1),
        default=DEFAULT_OBSERVER_THREADS,
        show_default=True,
        help=(
            "Threads that run observers' plain (not async) methods, for all leases together; "
            "the decoder has threads of its own."
        ),
    ),
    click.option(
        "--dead-letter-dir",
        envvar="CFP_DEAD_LETTER_DIR",
        help="Folder of dead-lettered batches (default with --observer spark: OUTPUT/dead-letter).",
    ),
    click.option(
        "--stuck-after",
        envvar="CFP_STUCK_AFTER",
        type=click.FloatRange(min=1),
        default=DEFAULT_STUCK_AFTER_S,
        show_default=True,
        help="Seconds a lease with work may go without progress (its observer failing, or not "
        "returning, or its reads) before it is reported STUCK (cfp_lease_stuck, `cfp status`, "
        "/status), with why.",
    ),
    click.option(
        "--drain-timeout",
        envvar="CFP_DRAIN_TIMEOUT",
        type=click.FloatRange(min=0),
        default=DEFAULT_DRAIN_S,
        show_default=True,
        help="Seconds a host told to stop (SIGTERM, SIGINT) waits for its observers' writes and "
        "its jobs' last run; then it releases its leases with their last checkpoints and exits, "
        "leaving the rest behind (logged as host.drain_cut). Keep it below your orchestrator's "
        "grace period.",
    ),
)
# --observer spark: where its tables go, its session, its writes and its state job
SPARK_OPTIONS: Options = (
    click.option(
        "--output",
        envvar="CFP_OUTPUT",
        help="--observer spark: where the Delta tables go (OUTPUT/changes, OUTPUT/state): a local "
        "folder, or abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH.",
    ),
    output_connection_option,
    spark_master_option,
    spark_remote_option,
    spark_conf_option,
    click.option(
        "--state-interval",
        envvar="CFP_STATE_INTERVAL",
        type=click.FloatRange(min=0.1),
        default=DEFAULT_STATE_EVERY_S,
        show_default=True,
        help="--observer spark: seconds between runs of the state job (one host runs it: the one "
        "holding its lease, first one interval after taking it), which MERGEs the new "
        "change-log commits into the state table.",
    ),
    click.option(
        "--spark-max-rows",
        envvar="CFP_SPARK_MAX_ROWS",
        type=click.IntRange(min=1),
        default=DEFAULT_MAX_ROWS,
        show_default=True,
        help="--observer spark: most rows in one Spark write (all leases of the host together).",
    ),
    click.option(
        "--spark-max-wait",
        envvar="CFP_SPARK_MAX_WAIT",
        type=click.FloatRange(min=0),
        default=DEFAULT_MAX_WAIT_S,
        show_default=True,
        help="--observer spark: longest a batch waits for others to share a Spark write (seconds).",
    ),
    click.option(
        "--spark-warm-up-rows",
        envvar="CFP_SPARK_WARM_UP_ROWS",
        type=click.IntRange(min=0),
        default=DEFAULT_WARM_UP_ROWS,
        show_default=True,
        help="--observer spark: made-up rows written three times before the first real write "
        "(embedded Spark; 0: none).",
    ),
    click.option(
        "--history/--no-history",
        "keep_history",
        envvar="CFP_HISTORY",
        default=True,
        show_default=True,
        help="--observer spark: the state job also keeps OUTPUT/history, one row per version of "
        "each blob with the event times it was valid from and to (the account as of any time).",
    ),
)
# the host's endpoints
HTTP_OPTIONS: Options = (
    click.option(
        "--http/--no-http",
        "http_on",
        envvar="CFP_HTTP",
        default=True,
        show_default=True,
        help="Serve /healthz, /readyz, /metrics and /status.",
    ),
    click.option(
        "--http-host",
        envvar="CFP_HTTP_HOST",
        default=DEFAULT_HTTP_HOST,
        show_default=True,
        help="Address of the HTTP endpoints (0.0.0.0 in a container).",
    ),
    click.option(
        "--http-port",
        envvar="CFP_HTTP_PORT",
        type=click.IntRange(min=0, max=65535),
        default=DEFAULT_HTTP_PORT,
        show_default=True,
        help="Port of the HTTP endpoints (0: any free port; logged as http.listening). The default "
        "gives way to a free port when taken; a port set by flag or variable does not.",
    ),
)
# The Spark observer's options, as flags of `cfp run` of their own (SPARK_OPTIONS): each flag's
# parameter -> its key among the observer's options (`observers/builtin/spark/settings.py`).
SPARK_FLAGS = {
    "output": "output",
    "output_connection_string": "output_connection_string",
    "spark_master": "spark_master",
    "spark_remote": "spark_remote",
    "spark_conf_pairs": "spark_conf",
    "state_interval": "state_interval",
    "keep_history": "history",
    "spark_max_rows": "spark_max_rows",
    "spark_max_wait": "spark_max_wait",
    "spark_warm_up_rows": "spark_warm_up_rows",
    "hints_confirm_within": "hints_confirm_within",
    "hints_state_interval": "hints_state_interval",
}


def run_options(params: dict[str, Any], given: Callable[[str], bool]) -> RunOptions:
    """What `cfp run`'s parameters say (`given`: whether a parameter came by flag or variable,
    not by default). With `--observer spark`, its flags given are its first options; another
    observer ignores them."""
    spark = _spark_options(params, given)
    o = RunOptions(**params)
    if o.observer == "spark":
        hints = ("hints=true",) if o.hints_queue else ()
        o = dataclasses.replace(o, observer_options=(*spark, *hints, *o.observer_options))
    return o


def _spark_options(params: dict[str, Any], given: Callable[[str], bool]) -> tuple[str, ...]:
    """The Spark flags taken out of `params`, those `given` as the observer's KEY=VALUE
    options (the observer has the same defaults)."""
    pairs: list[str] = []
    for name, key in SPARK_FLAGS.items():
        value = params.pop(name)
        if given(name):
            values = value if isinstance(value, tuple) else (value,)
            pairs += [f"{key}={str(v).lower() if isinstance(v, bool) else v}" for v in values]
    return tuple(pairs)


def keep_secrets_out(o: RunOptions) -> None:
    """An observer option whose key names a connection string (`output_connection_string`,
    dashes or not) is a secret: out of every log line and error from now on."""
    for key, _, value in (pair.partition("=") for pair in o.observer_options):
        if key.replace("-", "_").endswith("connection_string"):
            register_connection_string(value)
