"""The unit tests mirror the packages: `tests/unit/<folder>/test_<module>[_<what>].py` tests
`<folder>/<module>.py`, so a module's tests are found where it stands. Only the checks of the
whole repository (layering, sizes, docs, locks, deploy files...) stand at `tests/unit/`."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "unit"


def strays(unit: Path, root: Path) -> list[str]:
    """Test files below `unit`'s package folders that name no module of the folder they mirror."""
    found = []
    for test in sorted(unit.rglob("test_*.py")):
        folder = root / test.parent.relative_to(unit)
        if test.parent == unit:
            continue  # a check of the whole repository
        modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
        subject = test.stem.removeprefix("test_")
        if not any(subject == m or subject.startswith(f"{m}_") for m in modules):
            found.append(str(test.relative_to(unit)))
    return found


def test_every_unit_test_file_mirrors_a_module() -> None:
    assert strays(UNIT, ROOT) == []


def test_a_test_file_that_mirrors_nothing_is_found(tmp_path: Path) -> None:
    (tmp_path / "processor" / "host").mkdir(parents=True)
    (tmp_path / "processor" / "host" / "renewer.py").write_text("")
    unit = tmp_path / "tests" / "unit"
    (unit / "processor" / "host").mkdir(parents=True)
    for name in ("test_renewer.py", "test_renewer_timing.py", "test_renewal.py"):
        (unit / "processor" / "host" / name).write_text("")
    assert strays(unit, tmp_path) == ["processor/host/test_renewal.py"]
