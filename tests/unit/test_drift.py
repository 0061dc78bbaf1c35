"""Names in prose that must keep pointing somewhere: every module or test path, and every
`package.module` or `package.module:Name`, that a docstring, a comment or a page of the docs
names must exist. Files move and get renamed; the prose that cites them is what a newcomer
reads, and nothing else would notice it going stale."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("processor", "leases", "observers", "tests", "bench", "deploy", ".ci")
PACKAGES = ("processor", "leases", "observers", "tests", "bench")
SKIPPED = {".venv", "node_modules", ".git", "build", "__pycache__", ".hypothesis", ".mypy_cache"}
# a file path: checked when it ends in .py or starts at a folder of the repository
PATH = re.compile(r"(?<![\w./~$-])((?:[\w.-]+/)*[\w-]+\.[a-z]{2,4})(?![\w/(-])")
# a dotted name in backticks, with `:Name` or not
DOTTED = re.compile(rf"`((?:{'|'.join(PACKAGES)})(?:\.\w+)+)(?::(\w+))?`")
TOP = {*SOURCES, "docs"}
# named in prose, but not files of this repository
NOT_OURS = {
    "parquet_archive.py": "a user's plugin in docs/observers.md's example",
    "start-connect-server.sh": "Spark's own script",
    "log4j2.properties": "Spark's logging settings",
}


@dataclass(frozen=True, slots=True)
class Mention:
    where: str  # file:line
    text: str


def prose(root: Path) -> Iterator[Mention]:
    """Comments and docstrings of the sources, and every line of the README and docs/."""
    for folder in SOURCES:
        for path in sorted((root / folder).rglob("*.py")):
            if SKIPPED.isdisjoint(path.relative_to(root).parts):
                yield from _python_prose(root, path)
    for page in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        if page.exists():
            for i, line in enumerate(page.read_text().splitlines(), 1):
                yield Mention(f"{page.relative_to(root)}:{i}", line)


def _python_prose(root: Path, path: Path) -> Iterator[Mention]:
    name = path.relative_to(root)
    for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if t.type == tokenize.COMMENT or (
            t.type == tokenize.STRING and t.string.lstrip("rbuRBU").startswith(('"""', "'''"))
        ):
            yield Mention(f"{name}:{t.start[0]}", t.string)


@cache
def _files(root: Path) -> frozenset[str]:
    return frozenset(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and SKIPPED.isdisjoint(p.relative_to(root).parts)
    )


def path_exists(root: Path, path: str) -> bool:
    """A path of the repository, whole or its tail (`balancing/balancer.py`, `balancer.py`)."""
    return any(f == path or f.endswith(f"/{path}") for f in _files(root))


def is_checked(path: str) -> bool:
    return path not in NOT_OURS and (path.endswith(".py") or path.split("/", maxsplit=1)[0] in TOP)


def defines(module: Path, name: str) -> bool:
    """Whether the module binds `name` at its top level (a def, a class, an assignment or an
    import)."""
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found = {node.name}
        elif isinstance(node, ast.Assign):
            found = {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found = {node.target.id}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found = {(a.asname or a.name).split(".")[0] for a in node.names}
        else:
            continue
        if name in found:
            return True
    return False


def dotted_exists(root: Path, dotted: str, name: str | None) -> bool:
    """`a.b.c` or `a.b.c:Name`: a module (or package), then at most one name it defines."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:k])
        module = next(
            (f for f in (base.with_suffix(".py"), base / "__init__.py") if f.exists()), None
        )
        if module is None:
            continue
        rest = [*parts[k:], *([name] if name else [])]
        return not rest or (len(rest) == 1 and defines(module, rest[0]))
    return False


def stale(root: Path) -> list[str]:
    found = []
    for m in prose(root):
        for path in PATH.findall(m.text):
            if is_checked(path) and not path_exists(root, path):
                found.append(f"{m.where}: {path}")
        for dotted, name in DOTTED.findall(m.text):
            if not dotted_exists(root, dotted, name or None):
                found.append(f"{m.where}: {dotted}{':' + name if name else ''}")
    return found


def test_every_path_and_module_named_in_prose_exists() -> None:
    assert stale(ROOT) == []


def test_a_planted_stale_name_is_found(tmp_path: Path) -> None:
    (tmp_path / "leases" / "policy").mkdir(parents=True)
    (tmp_path / "leases" / "__init__.py").write_text("")
    (tmp_path / "leases" / "policy" / "__init__.py").write_text("")
    (tmp_path / "leases" / "policy" / "timings.py").write_text(
        '"""Intervals (see `leases.policy.timings:derive_timings`, taking.py)."""\n\n'
        "def derive_timings() -> None:  # like policy/timings.py, not `leases.policy.gone`\n"
        "    pass\n"
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "`leases.policy.timings:Timings` in tests/unit/test_timings.py, meta/segments.json\n"
    )
    _files.cache_clear()
    assert stale(tmp_path) == [
        "leases/policy/timings.py:1: taking.py",
        "leases/policy/timings.py:3: leases.policy.gone",
        "docs/a.md:1: tests/unit/test_timings.py",
        "docs/a.md:1: leases.policy.timings:Timings",
    ]
