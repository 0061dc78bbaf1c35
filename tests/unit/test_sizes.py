"""The size limits the packages keep (issue M): a class of at most 220 lines, a function of at
most 60, a module of at most 450, and (issue R) a folder of at most 12 modules besides its
`__init__`. Past them a part does too much to be read at once: split it by what it does, not by
line count, and a folder by concern."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("processor", "leases", "observers")
LIMITS = {"module": 450, "class": 220, "function": 60}
FOLDER_LIMIT = 12


def sizes(path: Path, root: Path) -> list[tuple[str, str, int]]:
    """(kind, name, lines) of the module and of each class and function in it."""
    source = path.read_text()
    where = str(path.relative_to(root))
    found = [("module", where, len(source.splitlines()))]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            found.append((kind, f"{where}:{node.name}", lines))
    return found


def too_large(paths: list[Path], root: Path = ROOT) -> list[str]:
    return [
        f"{kind} {name}: {lines} lines (at most {LIMITS[kind]})"
        for path in paths
        for kind, name, lines in sizes(path, root)
        if lines > LIMITS[kind]
    ]


def test_no_module_class_or_function_is_over_its_limit() -> None:
    paths = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
    assert len(paths) > 100
    assert too_large(paths) == []


def test_the_check_finds_a_function_over_the_limit(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    planted = tmp_path / "planted.py"
    planted.write_text(f"def long() -> None:\n{body}\n")
    assert too_large([planted], tmp_path) == ["function planted.py:long: 62 lines (at most 60)"]


def crowded(root: Path) -> list[str]:
    """Folders of the packages with more than `FOLDER_LIMIT` modules (an `__init__` aside)."""
    folders = {p.parent for package in PACKAGES for p in (root / package).rglob("*.py")}
    return sorted(
        f"{folder.relative_to(root)}: {count} modules (at most {FOLDER_LIMIT})"
        for folder in folders
        if (count := sum(1 for p in folder.glob("*.py") if p.name != "__init__.py")) > FOLDER_LIMIT
    )


def test_no_folder_holds_more_than_twelve_modules() -> None:
    assert crowded(ROOT) == []


def test_the_check_finds_a_crowded_folder(tmp_path: Path) -> None:
    for i in range(13):
        (tmp_path / "processor" / "host").mkdir(parents=True, exist_ok=True)
        (tmp_path / "processor" / "host" / f"m{i}.py").write_text("")
    (tmp_path / "processor" / "host" / "__init__.py").write_text("")
    assert crowded(tmp_path) == ["processor/host: 13 modules (at most 12)"]
