"""What a `cfp` process imports: no pandas for `cfp read` or a host with the log or jsonl
observer, and no Arrow compute for `cfp read`'s JSON lines. pyarrow imports pandas at its first array when it is installed (1-2 s of a short
read), and nothing of ours uses it; a plugin that wants pandas imports it itself. And what
Spark's Python workers import PySpark from: compiled byte code."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pyspark

from tests.helpers import emulate, json_lines, run_cfp


def imported(importtime: str) -> set[str]:
    """The modules `python -X importtime` reports on stderr (an import tried and refused is
    reported too: `pandas` alone is pyarrow's look for it, answered "none")."""
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in importtime.splitlines()
        if line.startswith("import time:")
    }


def pandas_loaded(modules: set[str]) -> bool:
    return any(m.startswith("pandas.") for m in modules)


async def test_a_read_and_a_jsonl_host_import_no_pandas(account: str, tmp_path: Path) -> None:
    await emulate(account, segments=1, events_per_segment=60)
    for fmt in ("native", "envelope", "debezium", "ydb"):
        read = await asyncio.to_thread(
            run_cfp, account, "read", "--format", fmt, flags=("-X", "importtime")
        )
        assert read.returncode == 0, read.stderr[-2000:]
        assert len(json_lines(read.stdout)) >= 60
        modules = imported(read.stderr)
        assert "pyarrow" in modules and not pandas_loaded(modules), fmt
        if fmt == "native":  # nor Arrow's compute kernels (0.4 s and 50 MiB when first called)
            assert "pyarrow.compute" not in modules

    out = tmp_path / "out"
    run = await asyncio.to_thread(
        run_cfp, account, "run", "--processor-name", "imports", "--until-caught-up", "--no-http",
        "--observer", f"jsonl:{out}", flags=("-X", "importtime"),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    delivered = [line for f in out.rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert len(delivered) >= 60
    modules = imported(run.stderr)
    assert "pyarrow" in modules and not pandas_loaded(modules)


def test_sparks_python_workers_import_pyspark_compiled() -> None:
    """Spark puts `pyspark.zip` first on its Python workers' path; `make install` adds byte code
    to it (`deploy/local/pyspark_bytecode.py`), or each worker compiles PySpark again."""
    workers_zip = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pyspark.sql.worker.plan_data_source_read as m; print(m.__file__)",
        ],
        env={**os.environ, "PYTHONPATH": str(workers_zip)},
        cwd="/",
        capture_output=True,
        text=True,
    )
    assert found.stdout.strip() == f"{workers_zip}/pyspark/sql/worker/plan_data_source_read.pyc", (
        found
    )
