"""Every folder's face: a docstring that says what the folder holds, and public names that load
from the folder itself (`from processor.streaming import BlobChangeFeedSource`)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from processor.faces import exports, typing_imports

ROOT = Path(__file__).resolve().parents[3]
FACES = sorted(
    p
    for package in ("processor", "leases", "observers")
    for p in (ROOT / package).rglob("__init__.py")
)


def package_of(init: Path) -> str:
    return ".".join(init.parent.relative_to(ROOT).parts)


def test_every_folder_says_what_it_holds() -> None:
    assert len(FACES) > 20
    missing = [package_of(p) for p in FACES if not ast.get_docstring(ast.parse(p.read_text()))]
    assert missing == []


@pytest.mark.parametrize("init", FACES, ids=package_of)
def test_every_exported_name_loads_from_its_folder(init: Path) -> None:
    package = importlib.import_module(package_of(init))
    names = getattr(package, "__all__", [])
    lazy = typing_imports(init)
    if getattr(getattr(package, "__getattr__", None), "__module__", "") == "processor.faces":
        assert sorted(names) == sorted(lazy)  # the TYPE_CHECKING block and `__all__` agree
    for name in names:
        value = getattr(package, name)
        module = lazy.get(name)
        if module is not None:
            assert value is getattr(importlib.import_module(module), name)


def test_a_face_loads_nothing_before_a_name_is_asked_for() -> None:
    script = (
        "import sys\n"
        "import processor.host, processor.streaming\n"
        "before = {m for m in sys.modules if m.startswith(('processor.host.', 'pyspark'))}\n"
        "from processor.streaming import BlobChangeFeedSource\n"
        "print(sorted(before), BlobChangeFeedSource.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "processor.streaming.source"]


def test_a_name_the_face_does_not_list_is_an_attribute_error(tmp_path: Path) -> None:
    (tmp_path / "face").mkdir()
    init = tmp_path / "face" / "__init__.py"
    init.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from json import dumps\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        face = importlib.import_module("face")
        load = exports("face")
        assert load("dumps") is importlib.import_module("json").dumps
        with pytest.raises(AttributeError, match="'face' has no attribute 'loads'"):
            load("loads")
        assert face.dumps is load("dumps")  # kept after the first use
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("face", None)
