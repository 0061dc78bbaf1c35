"""The core install, in a fresh virtualenv made from its lock (hash-checked, as a user installs
it): it reads the feed and delivers it without PySpark, and says which extra a command it
cannot run needs. The thin host (`[connect]`) is tested in test_spark.py, beside its Spark
Connect server."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest

from processor.emulator.azurite import Azurite
from tests.helpers import Feed, emulate_afresh, json_lines
from tests.venvs import has_module, run_in, virtualenv

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = virtualenv(tmp_path_factory.mktemp("core") / "venv", "requirements.lock")
    assert not has_module(python, "pyspark") and not has_module(python, "deltalake")
    return python


@pytest.fixture(scope="module")
async def feed(azurite: Azurite) -> Feed:
    records = await emulate_afresh(
        azurite.connection_string, seed=71, segments=2, events_per_segment=300, shards=(2, 3)
    )
    return Feed(
        azurite.connection_string, {str(r["id"]) for r in records if r["eventType"] != "Control"}
    )


async def test_the_core_reads_and_delivers_the_feed_without_pyspark(
    core: Path, feed: Feed, tmp_path: Path
) -> None:
    read = await asyncio.to_thread(run_in, core, feed.conn, "read")
    assert read.returncode == 0, read.stderr[-2000:]
    assert Counter(str(e["id"]) for e in json_lines(read.stdout)) == Counter(feed.ids)

    out = tmp_path / "out"
    run = await asyncio.to_thread(
        run_in, core, feed.conn, "run", "--processor-name", "core", "--until-caught-up", "--no-http",
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
    done = await asyncio.to_thread(run_in, core, feed.conn, *args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert says in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
