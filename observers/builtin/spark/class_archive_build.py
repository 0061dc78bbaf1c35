"""`python -m observers.builtin.spark.class_archive_build`: make this install's class archive of
the Spark JVM (`session/class_archive.py`), as `make install` does.

The archive holds the classes of a training run that does what a host's JVM does first: an
embedded session opens, makes the three tables, appends made-up changes for two leases the way
the change log does (fenced, idempotent writes), and runs the state job once (its MERGEs into
the state and the history). The JVM writes the archive as it exits. It becomes the install's
only once that JVM has exited cleanly: a JVM that maps a cut archive crashes.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from observers.builtin.spark.changelog.warm_up import warm_up
from observers.builtin.spark.session.class_archive import (
    JAVA_OPTIONS_KEY,
    PREFIX,
    QUIET,
    archive_path,
    java_binary,
)
from observers.builtin.spark.session.jars import spark_jars
from observers.builtin.spark.session.output import parse_output
from observers.builtin.spark.session.session import SparkOptions, open_session
from observers.builtin.spark.state.state_job import StateJob

TRAINING_ROWS = 2_000  # per write: the classes are what counts, not the volume
EXIT_TIMEOUT_S = 300.0  # the JVM writes some 200 MB as it exits


class ClassArchiveError(Exception):
    """The training run's JVM did not exit cleanly: no archive was made."""


class NoClassArchive(Exception):
    """This JDK makes no class archive: Spark's JVMs start without one (slower, no less right)."""


def unable(java: str, folder: Path) -> str | None:
    """Why this JDK makes no class archive (one without its own base archive, or started with
    -Xshare:off, refuses to start a JVM asked to), or None when it can."""
    probe = folder / "probe.jsa"
    command = [java or "java", f"-XX:ArchiveClassesAtExit={probe}", QUIET, "-version"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{command[0]} did not run: {e}"
    finally:
        probe.unlink(missing_ok=True)
    if done.returncode != 0:
        return " ".join(done.stderr.split())[:300] or f"{command[0]} exited with {done.returncode}"
    return None


def build(*, force: bool = False) -> tuple[Path, bool]:
    """Make the archive unless this install has it (`force`: again); (its path, whether made).
    Older archives (of another PySpark, jars or JDK) are removed. Errors: `ClassArchiveError`;
    `NoClassArchive` when this JDK cannot make one."""
    target = archive_path(spark_jars())
    if target.is_file() and not force:
        return target, False
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    if (why := unable(java_binary(), folder)) is not None:
        raise NoClassArchive(why)
    for old in folder.glob(f"{PREFIX}*.jsa*"):
        old.unlink()
    partial = target.with_suffix(".jsa.partial")
    _train(partial)
    partial.replace(target)
    return target, True


def _train(archive: Path) -> None:
    """The training run, in this process; returns once its JVM has exited and written `archive`.
    Errors: `ClassArchiveError` when the JVM exits with an error or writes nothing."""
    scratch = Path(tempfile.mkdtemp(prefix="cfp-class-archive-"))
    try:
        options = SparkOptions(
            parse_output(str(scratch / "tables")),
            master="local[1]",
            conf={JAVA_OPTIONS_KEY: f"-XX:ArchiveClassesAtExit={archive} {QUIET}"},
            class_archive=False,
        )
        session = open_session(options)
        jvm = session.sparkContext._gateway.proc
        _exercise(session, options)
        session.stop()
        jvm.stdin.close()  # PySpark's JVM exits when its stdin closes: the archive is written
        code = jvm.wait(timeout=EXIT_TIMEOUT_S)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if code != 0 or not archive.is_file() or archive.stat().st_size == 0:
        archive.unlink(missing_ok=True)
        raise ClassArchiveError(f"the training JVM exited with {code}: no class archive made")


def _exercise(session: Any, options: SparkOptions) -> None:
    """A host's first work: the tables and change log appends (`warm_up`, into the training's
    own tables), then one run of the state job on them."""
    started = time.monotonic()
    # two writes per lease: the second one syncs with what the first committed
    warm_up(session, TRAINING_ROWS, is_closed=lambda: False, into=options.output, writes=2)
    wrote = time.monotonic()
    output = options.output
    job = StateJob(
        session,
        changes=output.changes,
        state_table=output.state,
        history_table=output.history,
        optimize_every_s=3600.0,  # a run's MERGEs; its OPTIMIZE is rare
    )
    job.run_once()
    session.read.format("delta").load(output.state).count()
    print(f"trained: writes {wrote - started:.0f}s, state job {time.monotonic() - wrote:.0f}s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="make it again")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        path, made = build(force=args.force)
    except ClassArchiveError as e:
        print(f"cfp: {e}", file=sys.stderr)
        return 1
    except NoClassArchive as e:
        print(f"no class archive of the Spark JVM: this JDK makes none ({e}); Spark starts without")
        return 0
    took = f"made in {time.monotonic() - started:.0f}s" if made else "up to date"
    print(f"class archive of the Spark JVM: {path} ({took})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
