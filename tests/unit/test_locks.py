"""The lock files pin what pyproject.toml pins, at the same versions, every line with hashes: a
dependency changed in pyproject.toml without `make lock` fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


SELF = re.compile(r"^changefeed-processor\[([a-z,]+)\]$")


def pins(requirements: list[str]) -> dict[str, str]:
    """`name: version` of each requirement; one of cfp's own extras (`changefeed-processor[x]`)
    brings in that extra's."""
    found = {}
    for line in requirements:
        if m := SELF.match(line.strip()):
            for extra in m.group(1).split(","):
                found |= pins(PROJECT["optional-dependencies"][extra])
            continue
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


LOCKS = {  # the lock of each role: the core, and the core with one extra
    "requirements.lock": None,
    "requirements-connect.lock": "connect",
    "requirements-spark.lock": "spark",
    "requirements-dev.lock": "dev",
}


def wanted(extra: str | None) -> dict[str, str]:
    found = pins(PROJECT["dependencies"])
    return found | (pins(PROJECT["optional-dependencies"][extra]) if extra else {})


@pytest.mark.parametrize(("lock", "extra"), LOCKS.items())
def test_each_lock_pins_what_pyproject_pins(lock: str, extra: str | None) -> None:
    have = locked(ROOT / "deploy" / lock)
    stale = {n: (v, have.get(n)) for n, v in wanted(extra).items() if have.get(n) != v}
    assert not stale, f"deploy/{lock} is stale (pyproject, lock): {stale}; run `make lock`"


def test_no_lock_holds_a_development_tool_but_the_development_lock() -> None:
    dev_only = set(pins(PROJECT["optional-dependencies"]["dev"])) - set(wanted("spark"))
    dev_only -= {"pyyaml"}  # the tests read YAML; pyspark-client needs it too
    for lock, extra in LOCKS.items():
        if extra != "dev":
            leaked = dev_only & set(locked(ROOT / "deploy" / lock))
            assert not leaked, f"deploy/{lock} installs development tools: {sorted(leaked)}"


@pytest.mark.parametrize(
    ("lock", "absent"),
    [
        # the core runs no Spark at all; a thin host has no JVM's PySpark, no py4j, no Delta
        ("requirements.lock", {"pyspark", "pyspark-client", "py4j", "deltalake", "pandas"}),
        ("requirements-connect.lock", {"pyspark", "py4j", "delta-spark", "deltalake"}),
        # pyspark and pyspark-client install the same `pyspark` package: never both
        ("requirements-spark.lock", {"pyspark-client"}),
        ("requirements-dev.lock", {"pyspark-client"}),
    ],
)
def test_each_role_leaves_out_what_it_must_not_install(lock: str, absent: set[str]) -> None:
    found = absent & set(locked(ROOT / "deploy" / lock))
    assert not found, f"deploy/{lock} installs {sorted(found)}"
