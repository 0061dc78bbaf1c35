"""`cfp spark-connect`: a Spark Connect server with Delta Lake and the jars of this install, run
in the foreground until SIGTERM or SIGINT (for `cfp run --spark-remote`).

The server's JVM dies with this process, however it ends: it is started with Linux's parent-death
signal set to SIGKILL (`prctl(PR_SET_PDEATHSIG)`, kept across spark-submit's `exec` of java). A
`cfp spark-connect` killed with SIGKILL used to leave its JVM serving, orphaned in its own session,
holding the port and its memory; a new server on that port then exited 255.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from observers import PluginLoadError
from observers.builtin.spark.session.install import require as require_pyspark
from observers.builtin.spark.session.session import embedded_settings, spark_conf
from processor import streaming
from processor.cli.common import fail, say_error, spark_conf_option, spark_master_option

AUTOLOAD = Path(streaming.__file__).parent / "autoload"
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


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
    help="Write the server's log to DIR/spark-connect.log (default: this terminal).",
)
def spark_connect_command(
    host: str,
    port: int,
    spark_master: str,
    spark_conf_pairs: tuple[str, ...],
    log_dir: Path | None,
) -> None:
    """Run a Spark Connect server with Delta Lake until SIGTERM or SIGINT, then stop it and
    exit 0. Hosts use it with --spark-remote sc://HOST:PORT; they send their storage
    credentials as session settings, so the server is started with none.
    """
    try:
        require_pyspark(remote=None, what="cfp spark-connect")
        conf = embedded_settings(
            {
                "spark.connect.grpc.binding.address": host,
                "spark.connect.grpc.binding.port": str(port),
                **spark_conf(spark_conf_pairs),
            }
        )
    except PluginLoadError as e:  # the command's own words, not --observer's
        fail(e.problem, 2)
    server = _start_server(conf, master=spark_master, log_dir=log_dir)
    stopping = threading.Event()  # read again at exit: a signal during the stop still counts
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: stopping.set())
    _watch(server, host, port, stopping)
    if server.poll() is not None:
        fail(f"the Spark Connect server exited with status {server.returncode}")
    _stop_group(server)
    raise SystemExit(0 if stopping.is_set() else 1)


def _start_server(
    conf: dict[str, str], *, master: str, log_dir: Path | None
) -> subprocess.Popen[bytes]:
    """spark-submit of the server class, in its own process group so that SIGTERM reaches
    spark-submit and the JVM together; its output to DIR/spark-connect.log or this terminal."""
    import pyspark  # noqa: PLC0415  (slow import, only here)

    home = Path(pyspark.__file__).parent
    out: Any = None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        out = (log_dir / "spark-connect.log").open("ab")
    parent = os.getpid()
    return subprocess.Popen(
        _submit_command(home, master, conf),
        env=_server_env(home),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: die_with(parent),  # noqa: PLW1509 - one thread yet: safe here
    )


def die_with(parent: int) -> None:
    """In the child, before it runs spark-submit: SIGKILL when `parent` dies (Linux; elsewhere
    nothing, and the old risk of an orphan stays). A parent already gone: exit now."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # not allowed here: the server runs, as it did before
    if os.getppid() != parent:  # the parent died before the setting took: nothing would tell us
        os._exit(1)


def _submit_command(home: Path, master: str, conf: dict[str, str]) -> list[str]:
    """The spark-submit command line of the server, with every setting as a `--conf`."""
    command = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS]
    command += ["--name", "cfp Spark Connect server", "--master", master]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return command


def _server_env(home: Path) -> dict[str, str]:
    """This environment, with Spark's home and this Python for the server's Python workers."""
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    # Spark registers the `pyspark_*` modules on its Python path in every session: with this
    # folder there, any client can read format("blobchangefeed")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(AUTOLOAD), os.environ.get("PYTHONPATH", "")) if p
    )
    return env


def _watch(
    server: subprocess.Popen[bytes], host: str, port: int, stopping: threading.Event
) -> None:
    """Wait until `stopping` is set, the server exits, or it has not listened within
    `READY_TIMEOUT_S` (said on stderr); say once when it is ready, for whoever waits to connect."""
    is_ready = False
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not stopping.is_set() and server.poll() is None:
        if not is_ready and _listening(host, port):
            is_ready = True
            click.echo(f"cfp: Spark Connect server ready at sc://{host}:{port}", err=True)
        elif not is_ready and time.monotonic() > deadline:
            say_error(f"the server did not listen on {host}:{port} in time")
            break
        time.sleep(0.2)


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _stop_group(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (spark-submit and the JVM), then SIGKILL if it has
    not stopped in time."""
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    except ProcessLookupError:
        pass
