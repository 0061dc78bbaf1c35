"""Each part is given the collaborators it uses: no code reaches through an environment object
(`env`, its `deps`, `policy`, `signals`, or a host's `parts`) to a collaborator's member, as in
`env.deps.progress.waiting(...)`. Such a chain hides what a part depends on, and ties it to the
shape of the environment."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("processor", "leases", "observers")
ENVIRONMENTS = {"env", "deps", "policy", "signals", "parts"}


def reaches(source: str) -> list[str]:
    """Attribute chains three deep or more that start at an environment (`self.` not counted)."""
    tree = ast.parse(source)
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or id(node) in inner:
            continue
        names, x = [], node
        while isinstance(x, ast.Attribute):
            names.append(x.attr)
            x = x.value
        if not isinstance(x, ast.Name):
            continue
        names.reverse()
        if x.id == "self" and names:
            root, depth = names[0], len(names) - 1
        else:
            root, depth = x.id, len(names)
        if root.lstrip("_") in ENVIRONMENTS and depth >= 3:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(found, key=lambda f: int(f.split(":")[0]))


def test_no_part_reaches_through_an_environment() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{where}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for where in reaches(path.read_text())
    ]
    assert found == []


def test_a_planted_reach_is_caught() -> None:
    source = """
def f(env, self):
    env.deps.progress.waiting("00")
    self.env.policy.timings.poll_s
    self._signals.drain.within
    progress = env.deps.progress
"""
    assert reaches(source) == [
        "3: env.deps.progress.waiting",
        "4: self.env.policy.timings.poll_s",
    ]
