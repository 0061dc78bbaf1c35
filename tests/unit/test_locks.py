"""pyproject.toml states compatible ranges (a package users install beside their own plugins must
not pin), and the lock files pin one version inside each range, every line with hashes: a range
changed in pyproject.toml that the locks no longer meet fails here until `make lock`."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


SELF = re.compile(r"^changefeed-processor\[([a-z,]+)\]$")


def ranges(requirements: list[str]) -> dict[str, SpecifierSet]:
    """`name: range` of each requirement; one of cfp's own extras (`changefeed-processor[x]`)
    brings in that extra's."""
    found = {}
    for line in requirements:
        if m := SELF.match(line.strip()):
            for extra in m.group(1).split(","):
                found |= ranges(PROJECT["optional-dependencies"][extra])
            continue
        requirement = Requirement(line)
        found[canonical(requirement.name)] = requirement.specifier
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


LOCKS = {  # the lock of each role: the core, and the core with one extra
    "requirements.lock": None,
    "requirements-connect.lock": "connect",
    "requirements-spark.lock": "spark",
    "requirements-dev.lock": "dev",
}


def wanted(extra: str | None) -> dict[str, SpecifierSet]:
    found = ranges(PROJECT["dependencies"])
    return found | (ranges(PROJECT["optional-dependencies"][extra]) if extra else {})


def every_requirement() -> list[str]:
    lists = [PROJECT["dependencies"], *PROJECT["optional-dependencies"].values()]
    return [line for requirements in lists for line in requirements if not SELF.match(line)]


@pytest.mark.parametrize("line", every_requirement())
def test_pyproject_states_a_range_with_both_bounds(line: str) -> None:
    operators = sorted(spec.operator for spec in Requirement(line).specifier)
    assert operators == ["<", ">="], f"pyproject.toml: {line!r} is not a range >=tested,<next"


def outside(have: dict[str, str], want: dict[str, SpecifierSet]) -> dict[str, tuple[str, str]]:
    """The packages whose locked version (or its absence) misses pyproject's range."""
    return {
        name: (str(spec), have.get(name, "missing"))
        for name, spec in want.items()
        if name not in have or not spec.contains(have[name], prereleases=True)
    }


@pytest.mark.parametrize(("lock", "extra"), LOCKS.items())
def test_each_lock_pins_a_version_inside_each_range(lock: str, extra: str | None) -> None:
    stale = outside(locked(ROOT / "deploy" / lock), wanted(extra))
    assert not stale, f"deploy/{lock} is stale (pyproject, lock): {stale}; run `make lock`"


def test_a_lock_outside_a_range_is_caught() -> None:
    want = ranges(["pyarrow>=26.0.1,<27", "click>=8.5.1,<9", "rich>=15,<16"])
    have = {"pyarrow": "27.0.0", "click": "8.5.1"}
    assert outside(have, want) == {
        "pyarrow": ("<27,>=26.0.1", "27.0.0"),
        "rich": ("<16,>=15", "missing"),
    }


def test_no_lock_holds_a_development_tool_but_the_development_lock() -> None:
    dev_only = set(ranges(PROJECT["optional-dependencies"]["dev"])) - set(wanted("spark"))
    dev_only -= {"pyyaml"}  # the tests read YAML; pyspark-client needs it too
    for lock, extra in LOCKS.items():
        if extra != "dev":
            leaked = dev_only & set(locked(ROOT / "deploy" / lock))
            assert not leaked, f"deploy/{lock} installs development tools: {sorted(leaked)}"


@pytest.mark.parametrize(
    ("lock", "absent"),
    [
        # the core runs no Spark at all; a thin host has no JVM's PySpark, no py4j, no Delta
        # Spark (delta-rs it has: its hints go straight into OUTPUT/hints)
        ("requirements.lock", {"pyspark", "pyspark-client", "py4j", "deltalake", "pandas"}),
        ("requirements-connect.lock", {"pyspark", "py4j", "delta-spark"}),
        # pyspark and pyspark-client install the same `pyspark` package: never both
        ("requirements-spark.lock", {"pyspark-client"}),
        ("requirements-dev.lock", {"pyspark-client"}),
    ],
)
def test_each_role_leaves_out_what_it_must_not_install(lock: str, absent: set[str]) -> None:
    found = absent & set(locked(ROOT / "deploy" / lock))
    assert not found, f"deploy/{lock} installs {sorted(found)}"
