"""The core install, in a fresh virtualenv made from its lock (hash-checked, as a user installs
it): it reads the feed and delivers it without PySpark, says which extra a command it cannot run
needs, and runs a plugin with options written from docs/observers.md. The thin host (`[connect]`) is tested in test_spark.py, beside its Spark
Connect server."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from processor.connection import ENV_VAR
from processor.emulator.azurite import ROOT, Azurite
from tests import patience
from tests.helpers import Feed, emulate_afresh, json_lines
from tests.venvs import UV, has_module, run_in, virtualenv

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


def documented_plugin() -> str:
    """The Parquet archive of docs/observers.md, as the page gives it."""
    page = (ROOT / "docs" / "observers.md").read_text()
    section = page[page.index("### Options of your own") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None
    return found.group(1)


async def test_a_plugin_with_options_written_from_the_docs_runs_under_an_installed_cfp(
    core: Path, feed: Feed, tmp_path: Path
) -> None:
    """docs/observers.md's `ParquetArchive`, copied from the page into a folder of its own, run
    by the `cfp` script of a fresh virtualenv where cfp is installed (not the checkout): its
    options typed, every event in its files once, its own checkpoints moving each lease to the
    end; a value of the wrong type refused by name before any lease is taken."""
    await asyncio.to_thread(
        subprocess.run, [str(UV), "pip", "install", "--quiet", "--no-deps", "--python", str(core),
        str(ROOT)], check=True, capture_output=True, timeout=patience.left_s(),
    )  # fmt: skip
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "parquet_archive.py").write_text(documented_plugin())
    out = tmp_path / "archive"

    def cfp(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(core.parent / "cfp"), "run", "--processor-name", "archive", "--until-caught-up",
             "--no-http", "--observer", "parquet_archive:ParquetArchive",
             "--observer-option", f"directory={out}", *options],
            cwd=plugin, env={"PATH": str(core.parent), ENV_VAR: feed.conn},
            capture_output=True, text=True, timeout=patience.left_s(),
        )  # fmt: skip

    refused = await asyncio.to_thread(cfp, "--observer-option", "rows_per_file=many")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "option 'rows_per_file': 'many' is not an integer" in refused.stderr
    assert not out.exists()

    done = await asyncio.to_thread(
        cfp, "--observer-option", "rows_per_file=100", "--observer-option", "flush-after-s=0.2"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    files = sorted(out.rglob("*.parquet"))
    ids = [i for f in files for i in pq.read_table(f).column("id").to_pylist()]
    assert Counter(ids) == Counter(feed.ids)
    assert len(files) > len({f.parent for f in files})  # files of 100 rows, not one per lease
    status = await asyncio.to_thread(
        run_in, core, feed.conn, "status", "--processor-name", "archive", "--json"
    )
    leases = json.loads(status.stdout)["leases"]
    assert leases and all(lease["caughtUp"] for lease in leases), status.stdout[-2000:]
