"""The class archive of cfp's Spark JVMs: their classes loaded, verified and laid out once.

A Spark driver with Delta loads about 17,000 classes from some 300 jars when it starts, and
checks each one. JDK 17 can archive the classes a run loaded (`-XX:ArchiveClassesAtExit`, a
dynamic class data sharing archive) and map them into later JVMs (`-XX:SharedArchiveFile`).
`make install` makes the archive once (`observers.builtin.spark.class_archive_build`); every
embedded session and `cfp spark-connect` then starts with it. Measured on 2 cores: an embedded
session opened in 7-8 s instead of 11-12, its first four Delta commits took 24 s instead of 28,
and its JVM used 60 s of CPU instead of 70-72.

The archive is only valid for the JDK, PySpark and jars it was made with. Its name carries a
digest of the last two and of the `java` found, so a new install makes a new one; the JVM checks
the rest itself and starts without the archive when it does not fit (never with an error).
`--spark-conf spark.driver.extraJavaOptions=-Xshare:off` turns it off: a user's options come
after ours, and the JVM takes the last.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"
# the JVM's own words on an archive it cannot use are no news to the user: it runs without
QUIET = "-Xlog:cds*=off"
PREFIX = "spark-classes-"


def archive_dir() -> Path:
    """Beside the virtualenv's PySpark: the archive lives and goes with that install."""
    return Path(sys.prefix) / "share" / "cfp"


def java_binary(env: Mapping[str, str] | None = None) -> str:
    """The `java` Spark's launcher runs: JAVA_HOME's, else the first on PATH ("" when none)."""
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java", path=env.get("PATH"))
    return os.path.realpath(found) if found else ""


def archive_name(spark_version: str, jars: Iterable[Path], java: str) -> str:
    """The archive's file name: a digest of what it was made with (jars by name and size)."""
    digest = hashlib.sha256(f"{spark_version}\0{java}".encode())
    for jar in sorted(jars):
        digest.update(f"\0{jar.name}\0{jar.stat().st_size}".encode())
    return f"{PREFIX}{digest.hexdigest()[:16]}.jsa"


def with_archive(conf: Mapping[str, str], archive: Path | None) -> dict[str, str]:
    """`conf` with the archive's options first in the driver's Java options (the user's own
    options follow, and win)."""
    if archive is None:
        return dict(conf)
    ours = f"-XX:SharedArchiveFile={archive} {QUIET}"
    theirs = conf.get(JAVA_OPTIONS_KEY, "").strip()
    return {**conf, JAVA_OPTIONS_KEY: f"{ours} {theirs}".strip()}


def archive_path(jars: Iterable[Path]) -> Path:
    """Where this install's archive is, or goes: by the installed PySpark, `jars` and `java`."""
    from pyspark.version import __version__  # noqa: PLC0415  (pyspark: only when starting it)

    return archive_dir() / archive_name(__version__, jars, java_binary())


def current_archive(jars: Iterable[Path]) -> Path | None:
    """This install's archive when `make install` made it, else None."""
    path = archive_path(jars)
    return path if path.is_file() else None
