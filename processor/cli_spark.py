"""`cfp verify`, `cfp sql` and `cfp spark-connect`: the tools around the Spark observer's tables."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from observers import PluginLoadError
from observers.spark.session import SparkOptions, open_session, output_path, spark_conf
from processor import connection
from processor.cli_common import (
    connection_option,
    fail,
    run_async,
    say_error,
    spark_conf_option,
    spark_master_option,
    spark_remote_option,
)
from processor.verify import Comparison, VerifyError, compare, list_account, read_state

output_option = click.option(
    "--output",
    envvar="CFP_OUTPUT",
    required=True,
    help="The folder the hosts write the tables into (their --output).",
)


def _output(text: str) -> Path:
    try:
        return output_path(text)
    except PluginLoadError as e:
        fail(str(e), 2)


@click.command("verify")
@output_option
@connection_option
@click.option(
    "--show",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Differences to print (all are counted).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON document for machines.")
def verify_command(output: str, connection_string: str | None, show: int, as_json: bool) -> None:
    """Compare the current-state table with a live listing of the storage account.

    Every blob of every container (except the `$`-prefixed system ones) must be a live row of
    the state table with the same ETag, size and content type, and every live row a blob.
    Exit status 0 only when they are equal; 1 when they differ or cannot be read.
    """
    folder = SparkOptions(_output(output)).state
    conn = connection.resolve(connection_string)

    async def main(stop: asyncio.Event) -> int:
        try:
            state, tombstones = read_state(folder)
            account = await list_account(conn)
        except (VerifyError, ValueError) as e:  # ValueError: a malformed connection string
            say_error(e)
            return 1
        result = compare(state, account)
        if as_json:
            click.echo(json.dumps(_verify_doc(result, tombstones, folder), indent=2))
        else:
            _print_verify(result, tombstones, folder, show)
        return 0 if result.is_equal else 1

    raise SystemExit(run_async(main))


def _verify_doc(result: Comparison, tombstones: int, folder: Path) -> dict[str, Any]:
    return {
        "state": str(folder),
        "equal": result.is_equal,
        "stateBlobs": result.state_blobs,
        "tombstones": tombstones,
        "accountBlobs": result.account_blobs,
        "differences": [
            {"container": d.container, "blob": d.name, "problem": d.problem}
            for d in result.differences
        ],
    }


def _print_verify(result: Comparison, tombstones: int, folder: Path, show: int) -> None:
    click.echo(
        f"state table  {folder}: {result.state_blobs:,} live blobs, {tombstones:,} tombstones"
    )
    click.echo(f"account      {result.account_blobs:,} blobs (containers not starting with $)")
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


ENVELOPE_VIEW = """SELECT stream_name, read_method, container AS object, blob AS key, op,
    id AS uuid, event_time AS source_timestamp, read_timestamp, sort_keys, raw AS payload
    FROM changes"""
"""The change log under the envelope's field names (`observers.envelope.Envelope`)."""


@click.command("sql")
@output_option
@click.argument("query")
@spark_master_option
@spark_remote_option
@spark_conf_option
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
    output: str,
    query: str,
    spark_master: str,
    spark_remote: str | None,
    spark_conf_pairs: tuple[str, ...],
    limit: int,
    truncate: int,
    as_json: bool,
) -> None:
    """Run a Spark SQL QUERY over the tables for a quick look.

    Views: `changes` (the change log), `envelope` (the change log with the envelope's field
    names), `state` (every blob, tombstones too) and `live` (the state's live blobs). Runs in an
    embedded Spark session, or on --spark-remote.
    """
    try:
        options = SparkOptions(
            _output(output),
            master=spark_master,
            remote=spark_remote,
            conf=spark_conf(spark_conf_pairs),
        )
    except PluginLoadError as e:
        fail(str(e), 2)
    from pyspark.errors import PySparkException  # noqa: PLC0415  (slow import)

    spark = open_session(options)
    try:
        for name, folder in (("changes", options.changes), ("state", options.state)):
            if not any(folder.glob("**/*.parquet")):
                fail(f"{folder}: no table here (is --output the hosts' --output?)")
            # mergeSchema: change logs from before the envelope columns lack them in old files
            reader = spark.read.option("mergeSchema", str(name == "changes").lower())
            reader.parquet(str(folder)).createOrReplaceTempView(name)
        spark.sql("SELECT * FROM state WHERE NOT deleted").createOrReplaceTempView("live")
        spark.sql(ENVELOPE_VIEW).createOrReplaceTempView("envelope")
        try:
            rows = spark.sql(query).limit(limit + 1).toArrow()
        except PySparkException as e:
            fail(str(e).strip().splitlines()[0])
    finally:
        spark.stop()
    shown = rows.slice(0, limit).to_pylist()
    if as_json:
        for row in shown:
            click.echo(json.dumps(row, default=str, ensure_ascii=False))
    else:
        click.echo(_text_table(rows.column_names, shown, truncate))
    if rows.num_rows > limit:
        click.echo(f"(first {limit} rows; --limit N for more)", err=True)


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


READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


@click.command("spark-connect")
@click.option(
    "--host",
    envvar="CFP_SPARK_CONNECT_HOST",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. The server has no authentication: keep it on loopback "
    "or a private network.",
)
@click.option(
    "--port",
    envvar="CFP_SPARK_CONNECT_PORT",
    type=click.IntRange(1, 65535),
    default=15002,
    show_default=True,
)
@spark_master_option
@spark_conf_option
@click.option(
    "--log-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where Spark's daemon scripts may write (default: a temporary folder).",
)
def spark_connect_command(
    host: str,
    port: int,
    spark_master: str,
    spark_conf_pairs: tuple[str, ...],
    log_dir: Path | None,
) -> None:
    """Run a Spark Connect server (PySpark's bundled start-connect-server.sh) until SIGTERM or
    SIGINT, then stop it and exit 0. Hosts use it with --spark-remote sc://HOST:PORT.
    """
    try:
        extra = spark_conf(spark_conf_pairs)
    except PluginLoadError as e:
        fail(str(e), 2)
    import pyspark  # noqa: PLC0415  (slow import, only here)

    home = Path(pyspark.__file__).parent
    script = home / "sbin" / "start-connect-server.sh"
    if not script.exists():
        fail(f"{script} is missing: this PySpark has no Spark Connect server")
    conf = {
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.sql.execution.arrow.localRelationThreshold": "0",
        **extra,
    }
    command = [str(script), "--wait", "--master", spark_master]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    logs = log_dir or Path(tempfile.mkdtemp(prefix="cfp-spark-connect-"))
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOG_DIR": str(logs),
        "SPARK_PID_DIR": str(logs),
        "PYSPARK_PYTHON": sys.executable,
    }
    server = subprocess.Popen(command, env=env, start_new_session=True)  # its own process group
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    is_ready = False
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not stopping and server.poll() is None:
        if not is_ready and _listening(host, port):
            is_ready = True
            click.echo(f"cfp: Spark Connect server ready at sc://{host}:{port}", err=True)
        elif not is_ready and time.monotonic() > deadline:
            say_error(f"the server did not listen on {host}:{port} in time")
            break
        time.sleep(0.2)
    if server.poll() is not None:
        fail(f"the Spark Connect server exited with status {server.returncode}")
    _stop_group(server)
    raise SystemExit(0 if stopping else 1)


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _stop_group(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (the script, spark-submit and the JVM), then
    SIGKILL if it has not stopped in time."""
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    except ProcessLookupError:
        pass
