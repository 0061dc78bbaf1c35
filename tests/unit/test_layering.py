"""The layering of the packages, read from their imports with `ast`: each folder may import only
the layers below it, so that the tree shows the architecture and keeps showing it.

    cli ──► host, admin ──► reading ──► changefeed ──► plumbing (processor/*.py) ──► leases, observers
     ├────► emulator ─────────────────────┤
     └────► streaming (the Spark source) ─┘ (and observers' Arrow schema; never host or leases)

`leases` and `observers` import nothing of ours; `host` and `admin` know nothing of each other.
A lazy import inside a function counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("processor", "leases", "observers")

# layer -> the layers it may import (its own always included)
ALLOWED: dict[str, set[str]] = {
    "leases": set(),
    "observers": set(),
    "plumbing": {"leases", "observers"},
    "changefeed": {"plumbing"},
    "emulator": {"changefeed", "plumbing"},
    "reading": {"changefeed", "plumbing", "leases", "observers"},
    "admin": {"reading", "changefeed", "plumbing", "leases", "observers"},
    "host": {"reading", "changefeed", "plumbing", "leases", "observers"},
    "streaming": {"changefeed", "plumbing", "observers"},
    "cli": {
        "host",
        "streaming",
        "admin",
        "reading",
        "changefeed",
        "emulator",
        "plumbing",
        "leases",
        "observers",
    },
    "main": {"cli"},  # `python -m processor`
}
FOLDERS = {"changefeed", "emulator", "reading", "admin", "host", "cli", "streaming"}


def layer_of(module: str) -> str | None:
    """The layer a dotted module name belongs to; None outside our packages."""
    parts = module.split(".")
    if parts[0] in ("leases", "observers"):
        return parts[0]
    if parts[0] != "processor":
        return None
    if len(parts) == 1:
        return "plumbing"  # `from processor import connection`: resolved by the caller
    if parts[1] in FOLDERS:
        return parts[1]
    return "main" if parts[1] == "__main__" else "plumbing"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import of `path`, relative ones resolved, `from processor import
    x` read as `processor.x`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], base]).strip(".")
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}" if base in PACKAGES else base


def violations(root: Path) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            mine = layer_of(module_name(path, root))
            assert mine is not None
            for line, target in imports(path, root):
                theirs = layer_of(target)
                if theirs is None or theirs == mine or theirs in ALLOWED[mine]:
                    continue
                where = path.relative_to(root)
                found.append(f"{where}:{line}: {mine} imports {target} ({theirs})")
    return list(dict.fromkeys(found))  # one line per import, however many names it takes


def test_every_folder_imports_only_the_layers_below_it() -> None:
    assert violations(ROOT) == []


def test_a_planted_import_against_the_layers_is_caught(tmp_path: Path) -> None:
    """A tree with one wrong-way import in each direction the rules forbid."""
    planted = {
        "processor/reading/stream.py": "from processor.host.worker import Worker\n",
        "processor/host/lag.py": "import processor.admin.report\n",
        "processor/changefeed/out.py": "from observers.formats import render\n",
        "processor/admin/report.py": "from ..cli import main\n",
        "leases/store.py": "from processor import connection\n",
        "processor/emulator/feed.py": "from processor.reading import barrier\n",
        "processor/streaming/plan.py": "from processor.host.lag import Lag\n",
        "processor/streaming/keys.py": "import leases.table_store\n",
        "processor/host/ok.py": "from processor.reading.barrier import may_enter\n",  # allowed
    }
    for name, text in planted.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    for package in PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
    assert sorted(violations(tmp_path)) == [
        "leases/store.py:1: leases imports processor.connection (plumbing)",
        "processor/admin/report.py:1: admin imports processor.cli (cli)",
        "processor/changefeed/out.py:1: changefeed imports observers.formats (observers)",
        "processor/emulator/feed.py:1: emulator imports processor.reading (reading)",
        "processor/host/lag.py:1: host imports processor.admin.report (admin)",
        "processor/reading/stream.py:1: reading imports processor.host.worker (host)",
        "processor/streaming/keys.py:1: streaming imports leases.table_store (leases)",
        "processor/streaming/plan.py:1: streaming imports processor.host.lag (host)",
    ]
