"""The lock files pin what pyproject.toml pins, at the same versions, every line with hashes: a
dependency changed in pyproject.toml without `make lock` fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(requirements: list[str]) -> dict[str, str]:
    found = {}
    for line in requirements:
        m = PIN.match(line.strip())
        assert m, f"pyproject.toml: {line!r} is not pinned with =="
        found[canonical(m.group(1))] = m.group(2)
    return found


def locked(path: Path) -> dict[str, str]:
    """`name==version` of every package the lock installs; each must carry hashes."""
    entries = re.split(r"\n(?=[A-Za-z0-9])", path.read_text())
    found = {}
    for entry in entries:
        m = PIN.match(entry)
        if m is None:
            continue  # the header
        assert "--hash=sha256:" in entry, f"{path.name}: {m.group(1)} has no hash"
        found[canonical(m.group(1))] = m.group(2)
    return found


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.mark.parametrize(
    ("lock", "groups"),
    [("requirements.lock", ["main"]), ("requirements-dev.lock", ["main", "dev"])],
)
def test_each_lock_pins_what_pyproject_pins(lock: str, groups: list[str]) -> None:
    wanted: dict[str, str] = {}
    for group in groups:
        deps = (
            PROJECT["dependencies"] if group == "main" else PROJECT["optional-dependencies"][group]
        )
        wanted |= pins(deps)
    have = locked(ROOT / "deploy" / lock)
    stale = {n: (v, have.get(n)) for n, v in wanted.items() if have.get(n) != v}
    assert not stale, f"deploy/{lock} is stale (pyproject, lock): {stale}; run `make lock`"


def test_the_runtime_lock_has_no_development_tool() -> None:
    dev = pins(PROJECT["optional-dependencies"]["dev"])
    runtime = locked(ROOT / "deploy" / "requirements.lock")
    assert not set(dev) & set(runtime) - set(pins(PROJECT["dependencies"]))
