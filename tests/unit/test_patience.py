"""No test waits a fixed number of seconds (issue T): every wait lasts as long as the test may
wait (`tests/patience.py`), so a busy machine makes a test slower, never red. Checked in the
source of the tests, with a planted wait of each kind."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the chaos runner is a program with a duration of its own, not a test; patience is the bound
EXEMPT = ("tests/chaos/", "tests/patience.py")
WAIT_KEYWORDS = {"timeout", "timeout_s", "within_s"}
# a line that bounds something in seconds for a reason of its own says so, and why
ON_PURPOSE = "# fixed on purpose:"


def _is_literal(node: ast.expr) -> bool:
    """A number, or arithmetic on numbers and names in capitals (module constants)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        return node.id.isupper()
    if isinstance(node, ast.BinOp):
        return _is_literal(node.left) and _is_literal(node.right)
    return False


def _name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _positional_wait(call: ast.Call) -> bool:
    """`x.wait(5)`, `asyncio.wait_for(task, 10)`, `asyncio.to_thread(event.wait, 5)`."""
    name, args = _name(call.func), call.args
    if name == "wait":
        return bool(args) and _is_literal(args[0])
    if name == "wait_for":
        return len(args) > 1 and _is_literal(args[1])
    if name == "to_thread":
        return len(args) > 1 and _name(args[0]) == "wait" and _is_literal(args[1])
    return False


def _is_monotonic(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "monotonic"
    )


def fixed_waits(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line` of every call given a fixed timeout (`timeout=60`, `within_s=WAIT_S`) and of
    every deadline made from the clock plus seconds (`time.monotonic() + 120`), but those
    marked `ON_PURPOSE` with why."""
    source = path.read_text()
    lines = source.splitlines()
    where = path.relative_to(root).as_posix()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            found += [
                f"{where}:{k.lineno} {k.arg}="
                for k in node.keywords
                if k.arg in WAIT_KEYWORDS
                and _is_literal(k.value)
                and ON_PURPOSE not in lines[k.lineno - 1]
            ]
            if _positional_wait(node) and ON_PURPOSE not in lines[node.lineno - 1]:
                found.append(f"{where}:{node.lineno} {_name(node.func)}(..., seconds)")
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Add)
            and _is_monotonic(node.left)
            and ON_PURPOSE not in lines[node.lineno - 1]
        ):
            found.append(f"{where}:{node.lineno} monotonic() +")
    return found


def test_no_test_waits_a_fixed_number_of_seconds() -> None:
    paths = [
        p
        for p in sorted((ROOT / "tests").rglob("*.py"))
        if not p.relative_to(ROOT).as_posix().startswith(EXEMPT)
    ]
    assert len(paths) > 80
    assert [w for p in paths for w in fixed_waits(p)] == []


def test_the_check_finds_each_kind_of_fixed_wait(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import time\n"
        "proc.wait(timeout=60)\n"
        "until(probe, 'x', within_s=2 * EXPIRY_S)\n"
        "deadline = time.monotonic() + 120\n"
        "window = time.monotonic() + seconds  # fixed on purpose: the fault's window\n"
        "calls = TableCalls(client, timeout_s=30)  # fixed on purpose: the deadline under test\n"
        "proc.wait(timeout=patience.left_s())\n"
        "pytest.mark.timeout(300)\n"
        "assert event.wait(10)\n"
        "await asyncio.wait_for(task, 5)\n"
        "await asyncio.to_thread(host.wait, 120)\n"
        "await asyncio.wait_for(task, patience.left_s())\n"
        "await asyncio.to_thread(run, 120)\n"
    )
    assert fixed_waits(planted, tmp_path) == [
        "planted.py:2 timeout=",
        "planted.py:3 within_s=",
        "planted.py:4 monotonic() +",
        "planted.py:9 wait(..., seconds)",
        "planted.py:10 wait_for(..., seconds)",
        "planted.py:11 to_thread(..., seconds)",
    ]
