"""cfp installed by role, each in a fresh virtualenv made from its lock (hash-checked, as a user
installs it): the core reads the feed and delivers it without PySpark; a thin host
(`[connect]`, pyspark-client) writes the Delta tables through a Spark Connect server with no
Java on its PATH; each says what to install when asked for what it lacks."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from processor.emulator.azurite import Azurite
from tests.helpers import Feed, emulate_afresh, json_lines, run_cfp
from tests.spark_cluster import spark_connect_server
from tests.venvs import has_module, virtualenv

pytestmark = pytest.mark.timeout(600)  # two virtualenvs and a Spark Connect server


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = virtualenv(tmp_path_factory.mktemp("core") / "venv", "requirements.lock")
    assert not has_module(python, "pyspark") and not has_module(python, "deltalake")
    return python


@pytest.fixture(scope="module")
def thin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = virtualenv(tmp_path_factory.mktemp("thin") / "venv", "requirements-connect.lock")
    assert has_module(python, "pyspark.sql.connect")
    assert not has_module(python, "py4j") and not has_module(python, "pyspark.core")
    return python


@pytest.fixture(scope="module")
async def feed(azurite: Azurite) -> Feed:
    records = await emulate_afresh(
        azurite.connection_string, seed=71, segments=2, events_per_segment=300, shards=(2, 3)
    )
    return Feed(
        azurite.connection_string, {str(r["id"]) for r in records if r["eventType"] != "Control"}
    )


@pytest.fixture(scope="module")
def spark_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with spark_connect_server(tmp_path_factory.mktemp("spark-connect")) as url:
        yield url


def cfp(python: Path, feed: Feed, *args: str) -> subprocess.CompletedProcess[str]:
    """`cfp ARGS` run by `python`, with only its virtualenv on PATH: no `java` to be found."""
    return run_cfp(feed.conn, *args, python=str(python), path=str(python.parent))


async def test_the_core_reads_and_delivers_the_feed_without_pyspark(
    core: Path, feed: Feed, tmp_path: Path
) -> None:
    read = await asyncio.to_thread(cfp, core, feed, "read")
    assert read.returncode == 0, read.stderr[-2000:]
    assert Counter(str(e["id"]) for e in json_lines(read.stdout)) == Counter(feed.ids)

    out = tmp_path / "out"
    run = await asyncio.to_thread(
        cfp, core, feed, "run", "--processor-name", "core", "--until-caught-up", "--no-http",
        "--observer", f"jsonl:{out}",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    delivered = [json.loads(line)["id"] for f in out.glob("*.jsonl") for line in f.open()]
    assert Counter(delivered) == Counter(feed.ids)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("run", "--observer", "spark", "--output", "/tmp/never"),
         "pip install 'changefeed-processor[spark]' for an embedded"),
        (("run", "--observer", "spark", "--output", "/tmp/never", "--spark-remote", "sc://127.0.0.1:9"),
         "needs the Spark Connect client, which this install lacks: pip install 'changefeed-processor[connect]'"),
        (("verify", "--output", "/tmp/never"), "pip install 'changefeed-processor[verify]'"),
        (("spark-connect",), "cfp spark-connect needs PySpark"),
    ],
)  # fmt: skip
async def test_the_core_says_which_extra_a_command_needs(
    core: Path, feed: Feed, args: tuple[str, ...], says: str
) -> None:
    done = await asyncio.to_thread(cfp, core, feed, *args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert says in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


async def test_a_thin_host_writes_through_spark_connect_with_no_java(
    thin: Path, feed: Feed, spark_connect: str, tmp_path: Path
) -> None:
    embedded = await asyncio.to_thread(
        cfp, thin, feed, "run", "--observer", "spark", "--output", str(tmp_path / "never")
    )
    assert embedded.returncode == 2, embedded.stderr[-2000:]
    assert "only the Spark Connect client (pyspark-client, no JVM)" in embedded.stderr

    output = tmp_path / "tables"
    run = await asyncio.to_thread(
        cfp, thin, feed, "run", "--processor-name", "thin", "--until-caught-up", "--no-http",
        "--observer", "spark", "--spark-remote", spark_connect, "--output", str(output),
        "--spark-warm-up-rows", "0",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    events = [json.loads(line).get("event") for line in run.stderr.splitlines() if line[:1] == "{"]
    assert "spark.committed" in events, events[-20:]
    changes = DeltaTable(str(output / "changes"))
    found = QueryBuilder().register("changes", changes).execute("SELECT id FROM changes")
    assert Counter(pa.table(found).column("id").to_pylist()) == Counter(feed.ids)
