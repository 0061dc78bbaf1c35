"""Fresh virtualenvs of one install role, made from its lock in deploy/ (hashes required) as a
user installs it, with the development install's `uv`: for the tests of the roles and for
bench/startup.py's thin host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from processor.emulator.azurite import ROOT
from tests import patience
from tests.helpers import run_cfp

UV = Path(sys.executable).parent / "uv"  # a dev dependency


def virtualenv(where: Path, *locks: str) -> Path:
    """A virtualenv at `where` with what `locks` pin; its python. Made again only when its
    locks changed."""
    python = where / "bin" / "python"
    stamp = where / ".locks"
    wanted = "".join((ROOT / "deploy" / lock).read_text() for lock in locks)
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    _run(UV, "venv", "--quiet", "--clear", "--python", sys.executable, where)
    for lock in locks:
        _run(UV, "pip", "install", "--quiet", "--python", python, "--require-hashes",
             "-r", ROOT / "deploy" / lock)  # fmt: skip
    stamp.write_text(wanted)
    return python


def run_in(python: Path, conn: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`cfp ARGS` run by another virtualenv's `python` with only that virtualenv on PATH (no
    `java` to be found), against the account `conn`."""
    return run_cfp(conn, *args, python=str(python), path=str(python.parent))


def has_module(python: Path, name: str) -> bool:
    found = _run(
        python, "-c", f"import importlib.util as u; print(u.find_spec({name!r}) is not None)"
    )
    return found.strip() == "True"


def _run(*command: object) -> str:
    done = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, timeout=patience.left_s(),
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, command))}: exit {done.returncode}: {done.stderr}")
    return done.stdout
