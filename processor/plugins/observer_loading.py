"""Turning `--observer` (and `--observer-option`) into a factory of observers.

`log`, `jsonl:DIR` and `spark` are built in; `module:Name` imports `Name` from `module` (found
on `PYTHONPATH` or in the host's working directory): an observer class, or a factory. A target
that declares `Options` gets them, typed (`observer_options`; the rules: `observers.options`).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from observers.builtin.jsonl import JsonlObserver
from observers.builtin.log import LogObserver
from observers.errors import PluginLoadError
from observers.formats import Format
from observers.options import PluginHost
from observers.protocol import ObserverFactory
from processor.plugins.observer_options import declared_options, make_options


@dataclass(frozen=True, slots=True)
class ObserverChoice:
    """What `--observer` and the options of the observer it names chose, before anything is
    built: the host carries it without knowing what any observer needs."""

    spec: str  # log, jsonl:DIR, spark or module:Name
    # KEY=VALUE, for a target with `Options` (--observer-option, and the Spark observer's own
    # flags); a value may be a secret (--output-connection-string): never logged
    options: tuple[str, ...] = field(default=(), repr=False)
    fmt: Format = Format.NATIVE  # the JSON shape of the jsonl observer's lines


def load_observer_factory(choice: ObserverChoice, *, host: PluginHost) -> ObserverFactory:
    """The factory `--observer SPEC` names, with its options made. Errors: `PluginLoadError`
    naming what is wrong.

    A factory may also be an async context manager (the Spark one is: one session per host);
    the host enters it before the first lease and leaves it after the last."""
    spec, fmt = choice.spec, choice.fmt
    if fmt is not Format.NATIVE and not spec.startswith("jsonl:"):
        raise PluginLoadError(spec, f"--format {fmt.value} is for the jsonl observer only")
    target, pairs = _target(spec, choice)
    return _factory(target, pairs, spec=spec, host=host)


def _target(spec: str, choice: ObserverChoice) -> tuple[object, tuple[str, ...]]:
    """What `spec` names, and the options it is given (a built-in's shorthand among them)."""
    if spec == "log":
        return LogObserver, choice.options
    if spec == "spark":  # its modules load only when it is chosen
        from observers.builtin.spark.observer import SparkObserverFactory  # noqa: PLC0415

        return SparkObserverFactory, choice.options
    if spec.startswith("jsonl:"):
        directory = spec[len("jsonl:") :]
        if not directory:
            raise PluginLoadError(spec, "jsonl needs a directory: jsonl:DIR")
        formats = () if choice.fmt is Format.NATIVE else (f"format={choice.fmt.value}",)
        return JsonlObserver, (f"directory={directory}", *formats, *choice.options)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise PluginLoadError(spec, "expected log, jsonl:DIR, spark or module:Name")
    if os.getcwd() not in sys.path:  # a console script's path lacks it, unlike `python -m`
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise PluginLoadError(spec, f"cannot import {module_name}: {e}") from e
    target = getattr(module, attr, None)
    if target is None:
        raise PluginLoadError(spec, f"{module_name} has no attribute {attr}")
    return target, choice.options


def _factory(
    target: Any, pairs: tuple[str, ...], *, spec: str, host: PluginHost
) -> ObserverFactory:
    """`target` as a factory of observers: an observer class is made with its options for each
    lease; a factory that declares options is made once, with them and `host`."""
    name = getattr(target, "__name__", type(target).__name__)
    try:
        declared = declared_options(target)
    except TypeError as e:
        raise PluginLoadError(spec, str(e)) from e
    observer_class = inspect.isclass(target) and any(
        callable(getattr(target, m, None)) for m in ("process_changes", "process_arrow")
    )
    if inspect.isclass(target) and not observer_class and declared is None:
        raise PluginLoadError(spec, f"{name} has no process_changes or process_arrow method")
    if not callable(target):
        raise PluginLoadError(spec, f"{name} is neither a class nor a factory")
    if declared is None:
        if pairs:
            raise PluginLoadError(spec, f"{name} takes no options (it declares no Options)")
        factory: Callable[[], Any] = target
        return factory
    options = make_options(declared, pairs, spec=spec)
    if observer_class:
        return lambda: target(options)
    made = target(options, host)
    if not callable(made):
        raise PluginLoadError(spec, f"{name}(options, host) returned {made!r}, not a factory")
    return made  # type: ignore[no-any-return]
