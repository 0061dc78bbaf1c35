"""Which PySpark an install has, told apart by its files (the real installs are tested in
tests/integration/test_install_roles.py), and what a command asks for on each."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from observers.builtin.spark.session.install import PySpark, installed, require
from observers.errors import PluginLoadError


def fake_pyspark(monkeypatch: pytest.MonkeyPatch, root: Path, *, core: bool) -> None:
    package = root / "pyspark"
    (package / "sql").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    if core:
        (package / "core").mkdir()
    for name in [m for m in sys.modules if m == "pyspark" or m.startswith("pyspark.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(root))


@pytest.mark.parametrize(("core", "kind"), [(True, PySpark.FULL), (False, PySpark.CLIENT)])
def test_the_client_is_pyspark_without_its_core(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, core: bool, kind: PySpark
) -> None:
    fake_pyspark(monkeypatch, tmp_path, core=core)
    assert installed() is kind


@pytest.mark.parametrize(
    ("found", "remote", "says"),
    [
        (PySpark.NONE, None, "[spark]' for an embedded"),
        (PySpark.NONE, "sc://h:1", "needs the Spark Connect client"),
        (PySpark.CLIENT, None, "only the Spark Connect client"),
    ],
)
def test_a_missing_role_is_named(
    monkeypatch: pytest.MonkeyPatch, found: PySpark, remote: str | None, says: str
) -> None:
    monkeypatch.setattr("observers.builtin.spark.session.install.installed", lambda: found)
    with pytest.raises(PluginLoadError, match=r"pip install 'changefeed-processor\[") as e:
        require(remote=remote)
    assert says in str(e.value)


@pytest.mark.parametrize(
    ("found", "remote"),
    [(PySpark.CLIENT, "sc://h:1"), (PySpark.FULL, "sc://h:1"), (PySpark.FULL, None)],
)
def test_what_suffices_passes(
    monkeypatch: pytest.MonkeyPatch, found: PySpark, remote: str | None
) -> None:
    monkeypatch.setattr("observers.builtin.spark.session.install.installed", lambda: found)
    require(remote=remote)
