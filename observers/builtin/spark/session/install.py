"""Which PySpark this install has, asked before any lease is taken: cfp installs by role, and a
host started with the spark observer on the wrong one must say what to install, not fail later
inside a session.

- none: the core install (reading, leases, the other observers);
- the Spark Connect client alone (`pyspark-client`, the `[connect]` extra): pure Python, no JVM,
  enough for `--spark-remote`;
- PySpark itself (the `[spark]` extra): a JVM for an embedded session and `cfp spark-connect`.
"""

from __future__ import annotations

import importlib.util
from enum import Enum
from pathlib import Path

from observers.errors import PluginLoadError

CONNECT_EXTRA = "pip install 'changefeed-processor[connect]'"
SPARK_EXTRA = "pip install 'changefeed-processor[spark]'"
VERIFY_EXTRA = "pip install 'changefeed-processor[verify]'"


class PySpark(Enum):
    NONE = "none"
    CLIENT = "client"  # pyspark-client: Spark Connect only
    FULL = "full"  # pyspark: its JVM and jars too


def installed() -> PySpark:
    """What is installed, found without importing it (importing PySpark costs a second)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return PySpark.NONE
    # both ship the same `pyspark` package; only PySpark has `pyspark.core` (its py4j side)
    folders = [Path(p) for p in spec.submodule_search_locations]
    return PySpark.FULL if any((f / "core").is_dir() for f in folders) else PySpark.CLIENT


def require(*, remote: str | None, what: str = "the spark observer") -> None:
    """Errors: `PluginLoadError` naming the extra to install, when this install cannot open the
    session `what` needs: Spark Connect at `remote`, or an embedded one (`remote` None)."""
    found = installed()
    if found is PySpark.NONE and remote is None:
        raise PluginLoadError(
            "spark",
            f"{what} needs PySpark, which this install lacks: {SPARK_EXTRA} for an embedded "
            f"Spark session, or give --spark-remote sc://HOST:PORT and {CONNECT_EXTRA} (the "
            "Spark Connect client alone, no JVM)",
        )
    if found is PySpark.NONE:
        raise PluginLoadError(
            "spark",
            f"{what} needs the Spark Connect client, which this install lacks: {CONNECT_EXTRA} "
            "(pure Python, no JVM)",
        )
    if found is PySpark.CLIENT and remote is None:
        raise PluginLoadError(
            "spark",
            f"{what} needs an embedded Spark session, but this install has only the Spark "
            "Connect client (pyspark-client, no JVM): give --spark-remote sc://HOST:PORT (a "
            f"server started with `cfp spark-connect`), or {SPARK_EXTRA} in an environment "
            "without pyspark-client",
        )
