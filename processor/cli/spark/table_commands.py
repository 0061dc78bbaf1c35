"""`cfp verify`, `cfp sql`, `cfp optimize` and `cfp spark-connect`: the tools around the Spark
observer's Delta tables."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from observers import PluginLoadError
from observers.builtin.spark.session.install import VERIFY_EXTRA
from observers.builtin.spark.session.install import require as require_pyspark
from observers.builtin.spark.session.output import (
    Output,
    delta_rs_options,
    excluded_container,
    parse_output,
)
from observers.builtin.spark.session.remotes import parse_remotes
from observers.builtin.spark.session.session import SparkOptions, open_session, spark_conf
from observers.builtin.spark.sql import table_ref
from observers.options import StorageAccess
from processor import connection
from processor.cli.common import (
    bundled,
    connection_option,
    fail,
    output_connection_option,
    run_async,
    say_error,
    spark_conf_option,
    spark_master_option,
    spark_remote_option,
)
from processor.streaming.registration import offer as offer_source

if TYPE_CHECKING:
    from processor.admin.history_check import HistoryCheck
    from processor.admin.verify import Comparison, StateRead

# pyarrow, deltalake and the Delta tables' code load inside the commands that use them

output_option = click.option(
    "--output",
    envvar="CFP_OUTPUT",
    required=True,
    help="Where the hosts write the tables (their --output): a folder or an abfss:// URI.",
)


@dataclass(frozen=True, slots=True)
class TablesSession:
    """A command's Spark session on the hosts' tables: where they are, how to reach them, and
    which Spark."""

    output: str
    connection_string: str | None = field(repr=False)  # secrets: never in a repr
    output_connection_string: str | None = field(repr=False)
    spark_master: str
    spark_remote: str | None
    spark_conf_pairs: tuple[str, ...]

    def settings(self) -> tuple[Output, SparkOptions]:
        """The parsed `--output` and the session's settings (exit 2 when one is wrong)."""
        where, access, _ = _where(
            self.output, self.connection_string, self.output_connection_string
        )
        spark = (self.spark_master, self.spark_remote, self.spark_conf_pairs)
        return where, _spark_options(where, access, *spark)


# `spark_on: TablesSession` of a command that opens a Spark session on the hosts' tables
tables_session = bundled(
    "spark_on",
    TablesSession,
    output_option,
    connection_option,
    output_connection_option,
    spark_master_option,
    spark_remote_option,
    spark_conf_option,
)


def _where(
    output: str, connection_string: str | None, output_connection_string: str | None
) -> tuple[Output, StorageAccess, StorageAccess]:
    """The parsed `--output`, its account's credentials and the feed's (exit 2 when wrong)."""
    from observers.builtin.spark.tables import check_layout  # noqa: PLC0415

    conn = connection.resolve(connection_string)
    try:
        where = parse_output(output)
        check_layout(where)
        access = connection.storage_access(connection.resolve_other(output_connection_string, conn))
        return where, access, connection.storage_access(conn)
    except (PluginLoadError, ValueError) as e:  # ValueError: a malformed connection string
        fail(str(e), 2)


@click.command("verify")
@output_option
@connection_option
@output_connection_option
@click.option(
    "--show",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Differences to print (all are counted).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON document for machines.")
def verify_command(
    output: str,
    connection_string: str | None,
    output_connection_string: str | None,
    show: int,
    as_json: bool,
) -> None:
    """Compare the current-state table with a live listing of the storage account.

    Every blob of every container (except the `$`-prefixed system ones, and the output's own
    container when the tables live in this account) must be a live row of the state table with
    the same ETag, size and content type, and every live row a blob. When the history table is
    kept, each blob's closed versions must meet each other and its state row. Reads the Delta
    tables with the `deltalake` package (no Spark). Exit status 0 only when all are equal; 1
    when they differ or cannot be read.
    """
    try:
        from observers.builtin.spark.state.state_job import applied_version  # noqa: PLC0415
        from processor.admin.history_check import check_history  # noqa: PLC0415
        from processor.admin.verify import (  # noqa: PLC0415
            VerifyError,
            compare,
            list_account,
            read_state,
        )
    except ModuleNotFoundError as e:
        if e.name != "deltalake":
            raise
        fail(
            "cfp verify reads the Delta tables with the deltalake package, which this install "
            f"lacks: {VERIFY_EXTRA} (PySpark is not needed)",
            2,
        )

    where, access, feed = _where(output, connection_string, output_connection_string)
    conn = connection.resolve(connection_string)
    left_out = excluded_container(where, access, feed)

    async def main(stop: asyncio.Event) -> int:
        options = delta_rs_options(where, access)
        try:
            state = await asyncio.to_thread(read_state, where.state, options)
            account = await list_account(conn, leave_out={left_out} if left_out else set())
            history = await asyncio.to_thread(
                check_history, where.history, where.state, options, applied=applied_version
            )
        except (VerifyError, ValueError) as e:  # ValueError: a malformed connection string
            say_error(e)
            return 1
        result = compare(state.blobs, account)
        if as_json:
            doc = _verify_doc(result, state, where.state, left_out)
            doc["history"] = _history_doc(history, where.history)
            click.echo(json.dumps(doc, indent=2))
        else:
            _print_verify(result, state, where.state, left_out, show)
            _print_history(history, where.history, show)
        return 0 if result.is_equal and not history else 1

    raise SystemExit(run_async(main))


def _verify_doc(
    result: Comparison, state: StateRead, table: str, left_out: str | None
) -> dict[str, Any]:
    return {
        "state": table,
        "equal": result.is_equal,
        "stateBlobs": result.state_blobs,
        "tombstones": state.tombstones,
        "provisional": state.provisional,
        "accountBlobs": result.account_blobs,
        "leftOut": left_out,
        "differences": [
            {"container": d.container, "blob": d.name, "problem": d.problem}
            for d in result.differences
        ],
    }


def _history_doc(check: HistoryCheck | None, table: str) -> dict[str, Any]:
    lag = check.behind if check else None
    return {
        "table": table,
        "kept": check is not None,
        "differences": check.differences if check else [],
        "behind": lag and {"history": lag[0], "state": lag[1]},
    }


def _print_verify(
    result: Comparison, state: StateRead, table: str, left_out: str | None, show: int
) -> None:
    click.echo(
        f"state table  {table}: {result.state_blobs:,} live blobs, {state.tombstones:,} "
        f"tombstones, {state.provisional:,} provisional (hints the feed has not confirmed)"
    )
    others = f", nor {left_out}: the tables' own container" if left_out else ""
    click.echo(
        f"account      {result.account_blobs:,} blobs (containers not starting with ${others})"
    )
    if result.is_equal:
        click.echo("EQUAL: every blob matches by name, ETag, size and content type")
        return
    missing, extra = result.count("missing from the state"), result.count("not in the account")
    differing = len(result.differences) - missing - extra
    click.echo(
        f"DIFFERENT: {missing:,} missing from the state, {extra:,} not in the account, "
        f"{differing:,} with other properties"
    )
    for d in result.differences[:show]:
        click.echo(f"  {d.describe()}")
    if len(result.differences) > show:
        click.echo(f"  ... and {len(result.differences) - show:,} more (--show N)")


def _print_history(check: HistoryCheck | None, table: str, show: int) -> None:
    if check is None:
        click.echo("history      none kept (the hosts run with --no-history)")
    elif not check:
        click.echo(f"history      {table}: EQUAL: each blob's versions lead to its state row")
    else:
        differences = check.differences
        click.echo(f"history      {table}: DIFFERENT from the state for {len(differences):,} blobs")
        if check.behind is not None:
            held, state = check.behind
            click.echo(
                f"  behind the state: it holds the change log up to version {held}, the state "
                f"up to {state}; the state job's next run brings it up (its last run stopped "
                "between the state's commit and the history's, as a drain cut short does)"
            )
        for line in differences[:show]:
            click.echo(f"  {line}")


def _history_view(spark: Any, where: Output) -> None:
    """The view `history`: the history table's closed versions, and the state's rows (the
    open versions)."""
    from observers.builtin.spark.state.history import every_version  # noqa: PLC0415

    spark.sql(every_version(where.history, where.state)).createOrReplaceTempView("history")


ENVELOPE_VIEW = """SELECT stream_name, read_method, container AS object, blob AS key, op,
    id AS uuid, event_time AS source_timestamp, read_timestamp, sort_keys, raw AS payload
    FROM changes"""
"""The change log under the envelope's field names (`observers.envelope.Envelope`)."""


def _spark_options(
    where: Output,
    access: StorageAccess,
    spark_master: str,
    spark_remote: str | None,
    spark_conf_pairs: tuple[str, ...],
) -> SparkOptions:
    try:
        remotes = parse_remotes(spark_remote)
        require_pyspark(remote=remotes[0] if remotes else None, what="this command")
        return SparkOptions(
            where,
            access=access,
            master=spark_master,
            remotes=remotes,
            conf=spark_conf(spark_conf_pairs),
        )
    except PluginLoadError as e:  # the command's own words, not --observer's
        fail(e.problem, 2)


def _with_session(options: SparkOptions, work: Callable[[Any], None]) -> None:
    """Run `work(session)` on a session opened for the tables; Spark's errors exit 1 with
    Spark's first line."""
    from pyspark.errors import PySparkException  # noqa: PLC0415  (slow import)

    from observers.builtin.spark.tables import is_delta_table  # noqa: PLC0415

    try:
        spark = open_session(options)
    except PluginLoadError as e:  # the command's own words, not --observer's
        fail(e.problem, 2)
    offer_source(spark)  # `cfp sql` may read format("blobchangefeed")
    try:
        for name, uri in (("changes", options.changes), ("state", options.state)):
            if not is_delta_table(spark, uri):
                fail(f"{uri}: no {name} table here (is --output the hosts' --output?)")
        work(spark)
    except PySparkException as e:
        fail(str(e).strip().splitlines()[0])
    finally:
        spark.stop()


@click.command("sql")
@click.argument("query")
@tables_session
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Rows to print at most.",
)
@click.option(
    "--truncate",
    type=click.IntRange(min=0),
    default=60,
    show_default=True,
    help="Longest value printed in a table cell (0: whole values).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per row.")
def sql_command(
    spark_on: TablesSession,
    query: str,
    limit: int,
    truncate: int,
    as_json: bool,
) -> None:
    """Run a Spark SQL QUERY over the tables for a quick look.

    Views: `changes` (the change log), `envelope` (the change log with the envelope's field
    names), `state` (every blob, tombstones too), `live` (the state's live blobs), `history`
    (every version of every blob, by event time: the history table's closed versions and the
    state's rows, the open ones), `changes_history` and `state_history` (the
    tables' commits, as DESCRIBE HISTORY gives them, which Spark does not take as a subquery),
    and `feed` (the change feed itself, read by the `blobchangefeed` source now: compare it
    with the change log). `{changes}`, `{state}` and `{history}` in QUERY stand for the Delta
    tables themselves, for what a view cannot do: `SELECT ... FROM {changes} VERSION AS OF 3`.
    Runs in an embedded Spark session, or on --spark-remote.
    """
    where, options = spark_on.settings()
    conn = connection.resolve(spark_on.connection_string)
    always = (("changes", where.changes), ("state", where.state))
    text = query
    for name, uri in (*always, ("history", where.history)):
        text = text.replace(f"{{{name}}}", table_ref(uri))
    found: list[Any] = []

    def work(spark: Any) -> None:
        for name, uri in always:
            spark.read.format("delta").load(uri).createOrReplaceTempView(name)
        if mentions(query, "history"):  # a view of it only when asked for: it may not be kept
            _history_view(spark, where)
        spark.sql("SELECT * FROM state WHERE NOT deleted").createOrReplaceTempView("live")
        spark.sql(ENVELOPE_VIEW).createOrReplaceTempView("envelope")
        for table, uri in always:
            name = f"{table}_history"
            if mentions(query, name):  # DESCRIBE HISTORY runs at once: only when asked for
                spark.sql(f"DESCRIBE HISTORY {table_ref(uri)}").createOrReplaceTempView(name)
        if mentions(query, "feed"):  # plans at once (it lists the feed): only when asked for
            feed = spark.read.format("blobchangefeed").option("connectionString", conn)
            feed.load().createOrReplaceTempView("feed")
        found.append(spark.sql(text).limit(limit + 1).toArrow())

    _with_session(options, work)
    rows = found[0]
    shown = rows.slice(0, limit).to_pylist()
    if as_json:
        for row in shown:
            click.echo(json.dumps(row, default=str, ensure_ascii=False))
    else:
        click.echo(_text_table(rows.column_names, shown, truncate))
    if rows.num_rows > limit:
        click.echo(f"(first {limit} rows; --limit N for more)", err=True)


def mentions(query: str, name: str) -> bool:
    """Whether QUERY names the view `name` (a whole word, not part of a longer name)."""
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", query, re.IGNORECASE) is not None


def _text_table(names: list[str], rows: list[dict[str, Any]], truncate: int) -> str:
    def cell(value: Any) -> str:
        text = "null" if value is None else str(value)
        return text if not truncate or len(text) <= truncate else text[: truncate - 3] + "..."

    cells = [[cell(r[n]) for n in names] for r in rows]
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]
    lines = ["  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(line.rstrip() for line in lines)


@click.command("optimize")
@tables_session
@click.option(
    "--vacuum",
    "vacuum_hours",
    type=click.IntRange(min=0),
    default=None,
    metavar="HOURS",
    help="Then VACUUM both tables: delete files no version of the last HOURS needs (Delta "
    "refuses less than 168 unless told otherwise with --spark-conf).",
)
def optimize_command(
    spark_on: TablesSession,
    vacuum_hours: int | None,
) -> None:
    """Compact the small files of the tables now (OPTIMIZE; the state job also does it every
    15 minutes), and with --vacuum delete the files old versions no longer need."""
    where, options = spark_on.settings()

    from observers.builtin.spark.state.state_job import optimize  # noqa: PLC0415
    from observers.builtin.spark.tables import is_delta_table  # noqa: PLC0415

    def work(spark: Any) -> None:
        kept = [where.history] if is_delta_table(spark, where.history) else []
        tables = [where.changes, where.state, *kept]

        def files() -> dict[str, int]:
            return {
                uri: int(spark.sql(f"DESCRIBE DETAIL {table_ref(uri)}").collect()[0]["numFiles"])
                for uri in tables
            }

        before = files()
        optimize(spark, *tables)
        if vacuum_hours is not None:
            for uri in tables:
                spark.sql(f"VACUUM {table_ref(uri)} RETAIN {vacuum_hours} HOURS").collect()
        for uri, n in files().items():
            click.echo(f"{uri}: {before[uri]:,} files before, {n:,} after")

    _with_session(options, work)
