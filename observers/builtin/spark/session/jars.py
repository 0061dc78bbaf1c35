"""The jars every Spark session of cfp loads: Delta Lake and hadoop-azure, fetched at install time.

`make install` copies them from Maven Central into `deploy/spark/jars/` (the pinned
`deploy/spark/pom.xml`), then runs `python -m observers.builtin.spark.session.jars --check`, which
fails the install when a copied jar carries a class that PySpark's own jars already carry (two
copies of a class on one classpath break at run time, in ways that depend on the order of the jars)
or when the Delta jars do not match the installed `delta-spark` and `pyspark` packages. Sessions get
the jars through `spark.jars`; nothing is ever downloaded at run time.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import sys
import zipfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

JARS_DIR_VAR = "CFP_SPARK_JARS_DIR"
# the checkout's deploy/spark/jars (an editable install, as `make install` makes)
DEFAULT_JARS_DIR = Path(__file__).resolve().parents[4] / "deploy" / "spark" / "jars"
DELTA_JAR = re.compile(r"^delta-spark_(?P<spark>\d+\.\d+)_(?P<scala>[\d.]+)-(?P<version>.+)\.jar$")
REQUIRED = ("delta-spark_", "delta-storage-", "hadoop-azure-")


class SparkJarsError(Exception):
    """The Delta Lake / hadoop-azure jars are missing or do not fit this PySpark."""


def jars_dir() -> Path:
    """`CFP_SPARK_JARS_DIR`, else the checkout's `deploy/spark/jars/`."""
    configured = os.environ.get(JARS_DIR_VAR)
    return Path(configured) if configured else DEFAULT_JARS_DIR


def spark_jars(folder: Path | None = None) -> list[Path]:
    """Every jar of `folder` (default `jars_dir()`), sorted. Errors: `SparkJarsError` naming the
    folder and how to fill it when a required jar is missing."""
    folder = folder or jars_dir()
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    missing = [name for name in REQUIRED if not any(j.name.startswith(name) for j in jars)]
    if missing:
        raise SparkJarsError(
            f"{folder}: no {', '.join(m.rstrip('-_') for m in missing)} jar here. Run `make "
            "install` (it runs `mvn -f deploy/spark/pom.xml dependency:copy-dependencies`), or "
            f"set {JARS_DIR_VAR} to a folder holding the jars of deploy/spark/pom.xml"
        )
    return jars


def _classes(jar: Path) -> Iterable[str]:
    with zipfile.ZipFile(jar) as z:
        for name in z.namelist():
            if (
                name.endswith(".class")
                and not name.startswith("META-INF/")
                and not name.endswith("module-info.class")
            ):
                yield name


def overlaps(ours: Iterable[Path], theirs: Iterable[Path]) -> dict[str, Counter[str]]:
    """For each of `ours` that carries classes one of `theirs` carries too: how many, per jar."""
    owner: dict[str, str] = {}
    for jar in theirs:
        for name in _classes(jar):
            owner.setdefault(name, jar.name)
    found: dict[str, Counter[str]] = {}
    for jar in ours:
        shared = Counter(owner[name] for name in _classes(jar) if name in owner)
        if shared:
            found[jar.name] = shared
    return found


def version_problems(jars: Iterable[Path], *, delta: str, spark: str) -> list[str]:
    """What does not fit: the Delta jar built for another Spark minor version, or another Delta
    version than the `delta-spark` Python package."""
    problems = []
    for jar in jars:
        m = DELTA_JAR.match(jar.name)
        if m is None:
            continue
        if m["version"] != delta:
            problems.append(
                f"{jar.name}: Delta {m['version']}, but delta-spark {delta} is installed"
            )
        if m["spark"] != ".".join(spark.split(".")[:2]):
            problems.append(f"{jar.name}: built for Spark {m['spark']}, but PySpark is {spark}")
    return problems


def check(folder: Path) -> list[str]:
    """Every problem with the jars of `folder` for the installed PySpark (empty: fit to use)."""
    import pyspark  # noqa: PLC0415  (slow import, only here)

    try:
        jars = spark_jars(folder)
    except SparkJarsError as e:
        return [str(e)]
    theirs = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    problems = version_problems(
        jars, delta=importlib.metadata.version("delta-spark"), spark=pyspark.__version__
    )
    for jar, shared in sorted(overlaps(jars, theirs).items()):
        top = ", ".join(f"{name} ({n} classes)" for name, n in shared.most_common(3))
        problems.append(f"{jar} duplicates classes of PySpark's {top}: exclude it in the pom")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="check the jars against PySpark")
    parser.add_argument("--dir", type=Path, default=None, help=f"default: ${JARS_DIR_VAR}")
    args = parser.parse_args(argv)
    folder = args.dir or jars_dir()
    if not args.check:
        print("\n".join(str(j) for j in spark_jars(folder)))
        return 0
    problems = check(folder)
    for problem in problems:
        print(f"cfp: jar check: {problem}", file=sys.stderr)
    if not problems:
        print(f"cfp: {len(spark_jars(folder))} jars in {folder} fit PySpark's own", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
