"""The plugin contract is typed: the example observer of docs/observers.md passes `mypy --strict`
against the `observers` package, and the same file with one method's signature wrong fails it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "observers.md"


def first_example(page: Path) -> str:
    """The page's first Python block: its example plugin."""
    found = re.search(r"```python\n(.*?)```", page.read_text(), re.DOTALL)
    assert found is not None, f"{page} has no python block"
    return found.group(1)


def mypy_strict(source: str, folder: Path) -> subprocess.CompletedProcess[str]:
    plugin = folder / "my_plugin.py"
    plugin.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(plugin)],
        cwd=ROOT,  # `observers` found as it is in a host's working directory
        capture_output=True,
        text=True,
        check=False,
        env={"MYPYPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_the_documented_plugin_passes_mypy_strict_and_a_wrong_signature_does_not(
    tmp_path: Path,
) -> None:
    source = first_example(PAGE)
    assert "class PrintDeletes" in source and "Observer = PrintDeletes()" in source
    good = mypy_strict(source, tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    wrong = source.replace(
        "def close(self, ctx: PartitionContext, reason: CloseReason)", "def close(self, ctx: int)"
    )
    assert wrong != source
    bad = mypy_strict(wrong, tmp_path)
    assert bad.returncode == 1 and '"Closes"' in bad.stdout, bad.stdout + bad.stderr
