"""No test waits a fixed number of seconds (issue T): every wait lasts as long as the test may
wait (`tests/patience.py`), so a busy machine makes a test slower, never red. And no test sleeps
a fixed time to show that nothing happened (issue W): it waits for an event or counts ticks
instead, or says on the line why the time itself is the property under test. Checked in the
source of the tests, with a planted wait of each kind."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the chaos runner is a program with a duration of its own, not a test; patience is the bound
EXEMPT = ("tests/chaos/", "tests/patience.py")
WAIT_KEYWORDS = {"timeout", "timeout_s", "within_s"}
# a line that bounds something in seconds for a reason of its own says so, and why
ON_PURPOSE = "# fixed on purpose:"


def _is_literal(node: ast.expr, local: frozenset[str] = frozenset()) -> bool:
    """A number, or arithmetic on numbers, names in capitals (module constants) and `local`
    names (bound once to a number in the function)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        return node.id.isupper() or node.id in local
    if isinstance(node, ast.BinOp):
        return _is_literal(node.left, local) and _is_literal(node.right, local)
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
    if name == "timeout" and _name(getattr(call.func, "value", call.func)) == "asyncio":
        return bool(args) and _is_literal(args[0])  # `async with asyncio.timeout(5)`
    return False


def _is_monotonic(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "monotonic"
    )


def _read(path: Path, root: Path) -> tuple[ast.Module, str, Callable[[int], bool]]:
    """A test file's tree, its name as reported, and whether a line says `ON_PURPOSE` why."""
    source = path.read_text()
    lines = source.splitlines()
    return (
        ast.parse(source),
        path.relative_to(root).as_posix(),
        lambda lineno: ON_PURPOSE in lines[lineno - 1],
    )


def fixed_waits(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line` of every call given a fixed timeout (`timeout=60`, `within_s=WAIT_S`) and of
    every deadline made from the clock plus seconds (`time.monotonic() + 120`), but those
    marked `ON_PURPOSE` with why."""
    tree, where, on_purpose = _read(path, root)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            found += [
                f"{where}:{k.lineno} {k.arg}="
                for k in node.keywords
                if k.arg in WAIT_KEYWORDS and _is_literal(k.value) and not on_purpose(k.lineno)
            ]
            if _positional_wait(node) and not on_purpose(node.lineno):
                found.append(f"{where}:{node.lineno} {_name(node.func)}(..., seconds)")
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Add)
            and _is_monotonic(node.left)
            and not on_purpose(node.lineno)
        ):
            found.append(f"{where}:{node.lineno} monotonic() +")
    return found


def _numbers_bound_once(function: ast.AST) -> frozenset[str]:
    """The names a function assigns exactly once, to a number (`quiet_s = 60.0`)."""
    bound: dict[str, int] = {}
    numbers: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                bound[target.id] = bound.get(target.id, 0) + 1
                if _is_literal(node.value):
                    numbers.add(target.id)
    return frozenset(n for n in numbers if bound[n] == 1)


def _is_sleep(call: ast.Call) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "sleep"
        and _name(func.value) in ("asyncio", "time")
    )


def _polls(node: ast.AST) -> bool:
    """A `while`, or a `for` that can end early: a sleep in it is the pace of a poll."""
    if isinstance(node, ast.While):
        return True
    return isinstance(node, ast.For | ast.AsyncFor) and any(
        isinstance(n, ast.Break | ast.Return) for n in ast.walk(node)
    )


def fixed_sleeps(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line` of every `asyncio.sleep(s)` or `time.sleep(s)` of a fixed `s` above zero that
    is not the pace of a polling loop: a sleep that stands for "nothing happened", unless its
    line says why the time is the property (`ON_PURPOSE`)."""
    tree, where, on_purpose = _read(path, root)
    found: list[str] = []

    def visit(node: ast.AST, local: frozenset[str], polling: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, local | _numbers_bound_once(child), False)
                continue
            if (
                isinstance(child, ast.Call)
                and _is_sleep(child)
                and child.args
                and _is_literal(child.args[0], local)
                and not (isinstance(child.args[0], ast.Constant) and child.args[0].value == 0)
                and not polling
                and not on_purpose(child.lineno)
            ):
                found.append(f"{where}:{child.lineno} sleep(seconds)")
            visit(child, local, polling or _polls(child))

    visit(tree, frozenset(), False)
    return found


def _test_files() -> list[Path]:
    """Every source file of the tests the checks read."""
    paths = [
        p
        for p in sorted((ROOT / "tests").rglob("*.py"))
        if not p.relative_to(ROOT).as_posix().startswith(EXEMPT)
    ]
    assert len(paths) > 80
    return paths


def test_no_test_sleeps_a_fixed_time_for_nothing_to_happen() -> None:
    assert [w for p in _test_files() for w in fixed_sleeps(p)] == []


def test_the_check_finds_a_fixed_sleep_but_not_a_polls_pace(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import asyncio, time\n"
        "async def t(every_s):\n"
        "    await asyncio.sleep(2)\n"
        "    time.sleep(EXPIRY_S)\n"
        "    quiet_s = 60.0\n"
        "    await asyncio.sleep(2 * quiet_s)\n"
        "    for _ in range(3):\n"
        "        await asyncio.sleep(1)\n"
        "    await asyncio.sleep(0)\n"
        "    await asyncio.sleep(every_s)\n"
        "    while not done():\n"
        "        await asyncio.sleep(0.05)\n"
        "    time.sleep(8)  # fixed on purpose: the outage\n"
    )
    assert fixed_sleeps(planted, tmp_path) == [
        "planted.py:3 sleep(seconds)",
        "planted.py:4 sleep(seconds)",
        "planted.py:6 sleep(seconds)",
        "planted.py:8 sleep(seconds)",
    ]


def test_no_test_waits_a_fixed_number_of_seconds() -> None:
    assert [w for p in _test_files() for w in fixed_waits(p)] == []


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
        "async with asyncio.timeout(5):\n"
        "    pass\n"
    )
    assert fixed_waits(planted, tmp_path) == [
        "planted.py:2 timeout=",
        "planted.py:3 within_s=",
        "planted.py:4 monotonic() +",
        "planted.py:9 wait(..., seconds)",
        "planted.py:10 wait_for(..., seconds)",
        "planted.py:11 to_thread(..., seconds)",
        "planted.py:14 timeout(..., seconds)",
    ]
