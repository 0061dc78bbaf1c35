"""The layering of the packages, read from their imports with `ast`: each folder may import only
the layers below it, so that the tree shows the architecture and keeps showing it.

    cli ──► host ──────► reading ──► changefeed ──► plumbing (processor/*.py) ──► leases, observers
     │       ├─► hints (a queue's Blob Storage events) ─────► plumbing ──────► observers
     │       └─► plugins ─────────────────────────────────────────────────────► observers.builtin
     ├────► admin ─────► reading
     ├────► emulator ──► changefeed
     └────► streaming (the Spark source) ──► changefeed (and observers; never host or leases)

Inside a folder its parts are layers too, bottom first:
    host:       host_config ◄─ health ◄─ leasing ◄─ running ◄─ worker ◄─ balancing ◄─ host.py,
                assembly.py
    changefeed: errors ◄─ storage, decoding ◄─ the readers and positions at its top
    leases:     record, errors, reserved_rows ◄─ store, policy ◄─ its `__init__`
    observers:  the contract ◄─ builtin (log, jsonl, spark)

`leases` and `observers` import nothing of ours; `host` and `admin` know nothing of each other.
A lazy import inside a function counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("processor", "leases", "observers")

# module (or package) -> its layer; the longest prefix of a module's name decides
LAYERS = {
    "leases": "leases",  # its face: the `__init__` that exports the public names
    "leases.record": "leases.base",
    "leases.errors": "leases.base",
    "leases.reserved_rows": "leases.base",
    "leases.store": "leases.store",
    "leases.policy": "leases.policy",
    "observers": "observers",
    "observers.builtin": "observers.builtin",
    "processor": "plumbing",
    "processor.__main__": "main",
    "processor.changefeed": "changefeed",
    "processor.changefeed.errors": "changefeed.errors",
    "processor.changefeed.storage": "changefeed.storage",
    "processor.changefeed.decoding": "changefeed.decoding",
    "processor.reading": "reading",
    "processor.hints": "hints",
    "processor.plugins": "plugins",
    "processor.emulator": "emulator",
    "processor.streaming": "streaming",
    "processor.admin": "admin",
    "processor.host": "host",
    "processor.host.host_config": "host.config",
    "processor.host.health": "host.health",
    "processor.host.leasing": "host.leasing",
    "processor.host.running": "host.running",
    "processor.host.worker": "host.worker",
    "processor.host.balancing": "host.balancing",
    "processor.cli": "cli",
}
LEASES = {"leases", "leases.base", "leases.store", "leases.policy"}
CHANGEFEED = {"changefeed", "changefeed.errors", "changefeed.storage", "changefeed.decoding"}
BELOW_HOST = {"reading", "plugins", "hints", "plumbing", "observers"} | CHANGEFEED | LEASES
HOST_PARTS = [
    "host.config",
    "host.health",
    "host.leasing",
    "host.running",
    "host.worker",
    "host.balancing",
]

# layer -> the layers it may import (its own always included)
ALLOWED: dict[str, set[str]] = {
    "leases.base": set(),
    "leases.store": {"leases.base"},
    "leases.policy": {"leases.base"},
    "leases": {"leases.base", "leases.store", "leases.policy"},
    "observers": set(),
    "observers.builtin": {"observers"},
    "plumbing": LEASES | {"observers"},
    "changefeed.errors": {"plumbing"},
    "changefeed.storage": {"changefeed.errors", "plumbing"},
    "changefeed.decoding": {"changefeed.errors", "plumbing"},
    "changefeed": {
        "changefeed.errors",
        "changefeed.storage",
        "changefeed.decoding",
        "plumbing",
        "observers",  # the contract's words for an event: its subject, the backfill type
    },
    "emulator": CHANGEFEED | {"plumbing"},
    "hints": {"plumbing", "observers"},
    "reading": CHANGEFEED | LEASES | {"plumbing", "observers"},
    "plugins": {"plumbing", "observers", "observers.builtin"},
    "admin": CHANGEFEED | LEASES | {"reading", "plumbing", "observers"},
    "streaming": CHANGEFEED | {"plumbing", "observers", "observers.builtin"},
    **{part: BELOW_HOST | set(HOST_PARTS[:i]) for i, part in enumerate(HOST_PARTS)},
    "host": BELOW_HOST | set(HOST_PARTS),
    "cli": BELOW_HOST
    | set(HOST_PARTS)
    | {"host", "admin", "emulator", "streaming"}
    | {"observers.builtin"},
    "main": {"cli"},  # `python -m processor`
}


def layer_of(module: str) -> str | None:
    """The layer a dotted module name belongs to; None outside our packages."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        layer = LAYERS.get(".".join(parts[:end]))
        if layer is not None:
            return layer
    return None


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, name) of every import of `path`, relative ones resolved, `from a.b import c` read
    as `a.b.c`: the longest known prefix of a name decides its layer, so `from processor.host
    import worker` names the worker's layer, not the host's."""
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
                yield node.lineno, f"{base}.{alias.name}"


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


def test_the_layers_form_no_circle() -> None:
    """Each layer's allowed layers are all below it: following them never leads back."""

    def below(layer: str, path: tuple[str, ...]) -> None:
        assert layer not in path, " -> ".join((*path, layer))
        for lower in ALLOWED[layer]:
            below(lower, (*path, layer))

    assert set(LAYERS.values()) == set(ALLOWED)
    for layer in ALLOWED:
        below(layer, ())


def module_circle(root: Path) -> list[str]:
    """A circle of modules importing each other (function-level imports too; a package's
    `__init__` face left out), or [] when there is none."""
    modules = {
        module_name(path, root): path
        for package in PACKAGES
        for path in (root / package).rglob("*.py")
        if path.name != "__init__.py"
    }
    graph = {
        name: {t for _, t in imports(path, root) for t in (t, t.rpartition(".")[0]) if t in modules}
        - {name}
        for name, path in modules.items()
    }
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        return list(e.args[1])
    return []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert module_circle(ROOT) == []


def test_a_planted_circle_is_found(tmp_path: Path) -> None:
    (tmp_path / "processor").mkdir()
    (tmp_path / "processor" / "a.py").write_text("def f():\n    from processor.b import g\n")
    (tmp_path / "processor" / "b.py").write_text("from processor import a\n")
    assert sorted(set(module_circle(tmp_path))) == ["processor.a", "processor.b"]


def test_a_planted_import_against_the_layers_is_caught(tmp_path: Path) -> None:
    """A tree with one wrong-way import in each direction the rules forbid."""
    planted = {
        "processor/reading/stream.py": "from processor.host.worker.worker import Worker\n",
        "processor/host/health/lag_sampling.py": "import processor.admin.report\n",
        "processor/host/health/probe.py": "from processor.host.worker import delivery\n",
        "processor/host/worker/gap_step.py": "from processor.host.balancing import balancer\n",
        "processor/changefeed/out.py": "from observers.builtin.jsonl import JsonlObserver\n",
        "processor/changefeed/storage/layout.py": "from processor.changefeed import position\n",
        "processor/admin/report.py": "from ..cli import main\n",
        "leases/store/lease_store.py": "from processor import connection\n",
        "leases/record.py": "from leases.policy.balancing import plan_takes\n",
        "observers/events.py": "from observers.builtin.log import LogObserver\n",
        "processor/emulator/feed.py": "from processor.reading import barrier\n",
        "processor/streaming/plan.py": "from processor.host.health.lag_sampling import Lag\n",
        "processor/streaming/keys.py": "import leases.store.table_lease_store\n",
        "processor/host/ok.py": "from processor.reading.barrier import may_enter\n",  # allowed
        "processor/host/worker/ok.py": "from processor.host.health import lifecycle\n",  # allowed
    }
    for name, text in planted.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    for package in PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
    assert sorted(violations(tmp_path)) == [
        "leases/record.py:1: leases.base imports leases.policy.balancing.plan_takes"
        " (leases.policy)",
        "leases/store/lease_store.py:1: leases.store imports processor.connection (plumbing)",
        "observers/events.py:1: observers imports observers.builtin.log.LogObserver"
        " (observers.builtin)",
        "processor/admin/report.py:1: admin imports processor.cli.main (cli)",
        "processor/changefeed/out.py:1: changefeed imports observers.builtin.jsonl.JsonlObserver"
        " (observers.builtin)",
        "processor/changefeed/storage/layout.py:1: changefeed.storage imports"
        " processor.changefeed.position (changefeed)",
        "processor/emulator/feed.py:1: emulator imports processor.reading.barrier (reading)",
        "processor/host/health/lag_sampling.py:1: host.health imports processor.admin.report"
        " (admin)",
        "processor/host/health/probe.py:1: host.health imports processor.host.worker.delivery"
        " (host.worker)",
        "processor/host/worker/gap_step.py:1: host.worker imports"
        " processor.host.balancing.balancer (host.balancing)",
        "processor/reading/stream.py:1: reading imports processor.host.worker.worker.Worker"
        " (host.worker)",
        "processor/streaming/keys.py:1: streaming imports leases.store.table_lease_store"
        " (leases.store)",
        "processor/streaming/plan.py:1: streaming imports"
        " processor.host.health.lag_sampling.Lag (host.health)",
    ]
