"""The Spark observer's options (`--observer spark`), declared as any plugin's are: one typed
`SparkSettings`, made by the host from `--observer-option KEY=VALUE` or from `cfp run`'s own
flags for them (`--output`, `--spark-master`...). Loads nothing but the standard library, so
that `cfp run --help` can show their defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_MASTER = "local[*]"
# No warm-up by default: it only moves the JVM's compiling from the first real writes to made-up
# ones, and costs more than it saves (bench/spark_ingest, 180,000 events on 2 cores: caught up in
# 24.2 s without, 33.2 s with three writes of 20,000 rows; two MERGEs of 64 rows before taking
# leases took 10.3 s and left the first real write as slow: 39.3 s from the process's start
# against 32.6 s without). Worth it only for a host that starts on a quiet feed and wants its
# first real write as fast as later ones.
DEFAULT_WARM_UP_ROWS = 0
DEFAULT_MAX_ROWS = 100_000
DEFAULT_MAX_WAIT_S = 1.0
DEFAULT_STATE_EVERY_S = 10.0
DEFAULT_HINTS_STATE_EVERY_S = 2.0
DEFAULT_HINTS_CONFIRM_WITHIN_S = 15 * 60.0


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True, slots=True)
class SparkSettings:
    """`--observer spark`'s options, each also a flag of `cfp run` (`output` is `--output`)."""

    output: str | None = field(default=None, metadata=_help("where the Delta tables go"))
    # a secret: the host keeps its key out of the logs
    output_connection_string: str | None = field(
        default=None, repr=False, metadata=_help("the output account's connection string")
    )
    spark_master: str = field(default=DEFAULT_MASTER, metadata=_help("an embedded Spark's master"))
    spark_remote: str | None = field(
        default=None, metadata=_help("Spark Connect servers, comma-separated")
    )
    spark_conf: tuple[str, ...] = field(default=(), metadata=_help("Spark settings, KEY=VALUE"))
    state_interval: float = field(
        default=DEFAULT_STATE_EVERY_S, metadata=_help("seconds between runs of the state job")
    )
    history: bool = field(default=True, metadata=_help("the state job keeps OUTPUT/history"))
    spark_max_rows: int = field(
        default=DEFAULT_MAX_ROWS, metadata=_help("most rows in one Spark write")
    )
    spark_max_wait: float = field(
        default=DEFAULT_MAX_WAIT_S, metadata=_help("longest a batch waits for a shared write")
    )
    spark_warm_up_rows: int = field(
        default=DEFAULT_WARM_UP_ROWS, metadata=_help("made-up rows written before the first")
    )
    hints: bool = field(
        default=False,
        metadata=_help("keep OUTPUT/hints and fold it into the state (cfp run --hints-queue)"),
    )
    hints_state_interval: float = field(
        default=DEFAULT_HINTS_STATE_EVERY_S,
        metadata=_help(
            "with hints: seconds between runs of the state job, each taking the new hints "
            "(the change log's rows every state_interval)"
        ),
    )
    hints_confirm_within: float = field(
        default=DEFAULT_HINTS_CONFIRM_WITHIN_S,
        metadata=_help("with hints: seconds after which an unconfirmed hint is overdue"),
    )
