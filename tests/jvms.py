"""The options of the JVMs the tests start: quick to start, or lasting."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from observers.builtin.spark.session.class_archive import archive_dir, current_archive
from observers.builtin.spark.session.jars import spark_jars

# The JVMs the tests start themselves (embedded sessions, the Spark Connect servers, `cfp`
# commands' sessions; not the hosts', which `tests/cluster.py` starts with an environment of its
# own) compile with C1 only and collect on one thread. A test's JVM opens, makes a few small
# Delta commits and exits: measured 67 s -> 34 s of CPU (and 36 s -> 28 s of wall time alone)
# for a session that makes six; with several JVMs on two cores, CPU is the tests' time (a short
# session on the slower machines of 2026-11-28: 26 s with C2, 19.5 s without). Spark's code
# generation is off too (as `spark.*` system properties, which every Spark process takes as
# settings): the tests' data is a few thousand rows, and compiling code for each plan cost more
# than it saved (a session making 4 MERGEs and a state job run: 43 s -> 37 s alone; with C2,
# two state job tests: 183 s with it, 142 s without). A JVM that serves a whole file of tests
# or more (`lasting_jvm`) keeps C2: those two tests took 142 s with it, 181-187 s without.
# Production keeps the defaults: C2 and generated code pay off in a process of days. C1 alone
# gets a code cache of 48 MB where tiered compilation gets 240: a chaos run's Spark Connect server
# filled it within a minute and failed a write with "Out of space in CodeCache for adapters";
# the quick JVMs keep the larger one.
QUICK_JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC"
    " -Dspark.sql.codegen.wholeStage=false -Dspark.sql.codegen.factoryMode=NO_CODEGEN"
)
LASTING_JVM_OPTIONS = QUICK_JVM_OPTIONS.replace("-XX:TieredStopAtLevel=1 ", "")


def quick_jvms() -> None:
    os.environ.setdefault("JAVA_TOOL_OPTIONS", QUICK_JVM_OPTIONS)


@contextlib.contextmanager
def lasting_jvm() -> Iterator[None]:
    """JVMs started meanwhile (by this process or its children) compile with C2 too: for a
    session or a server that serves a whole file of tests, or all of them. Options of the
    user's own (`JAVA_TOOL_OPTIONS` set before the tests) are left as they are."""
    before = os.environ.get("JAVA_TOOL_OPTIONS")
    if before not in (None, QUICK_JVM_OPTIONS):
        yield
        return
    os.environ["JAVA_TOOL_OPTIONS"] = LASTING_JVM_OPTIONS
    try:
        yield
    finally:
        if before is None:
            del os.environ["JAVA_TOOL_OPTIONS"]
        else:
            os.environ["JAVA_TOOL_OPTIONS"] = before


def install_archive() -> Path:
    """The class archive `make install` made for this install (`class_archive.py`)."""
    archive = current_archive(spark_jars())
    assert archive is not None, f"no class archive in {archive_dir()}: `make install` makes it"
    return archive


def maps_file(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` mapped: a JVM that finds its class archive unfit runs
    without it, and says nothing (`-Xlog:cds*=off`); only its memory map tells."""
    return any(
        line.endswith(f" {path}") for line in Path(f"/proc/{pid}/maps").read_text().split("\n")
    )


def jvm_pids(*marks: str) -> list[int]:
    """The running Java processes whose command line holds every one of `marks`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue  # a process that just ended
        line = " ".join(a.decode(errors="replace") for a in args)
        if Path(args[0].decode(errors="replace")).name == "java" and all(m in line for m in marks):
            found.append(int(proc.name))
    return found
