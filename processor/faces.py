"""A package's face: the public names of a folder, importable from the folder itself
(`from processor.streaming import BlobChangeFeedSource`) but loaded only when first used, so
that importing one module of a folder loads none of the others (`cfp --help` loads no host).

An `__init__` lists its names in an `if TYPE_CHECKING:` block, as imports from their modules
(what mypy and readers see), and sets `__getattr__ = exports(__name__)`: the block is read
once, at the first name asked for."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path


def exports(package: str) -> Callable[[str], object]:
    """The `__getattr__` of `package`: each name its `TYPE_CHECKING` block imports, from there."""
    found: dict[str, str] = {}

    def load(name: str) -> object:
        if not found:
            found.update(typing_imports(Path(str(sys.modules[package].__file__))))
        module = found.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # asked once
        return value

    return load


def typing_imports(path: Path) -> dict[str, str]:
    """name -> module of every `from module import name` under `if TYPE_CHECKING:` in `path`."""
    return {
        alias.asname or alias.name: node.module
        for block in ast.parse(path.read_text()).body
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
