"""Turning `--observer` into a factory of observers.

`log`, `jsonl:DIR` and `spark` are built in; `module:Name` imports `Name` from `module`, a class
or a zero-argument factory.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from observers.builtin.jsonl import JsonlObserver
from observers.builtin.log import LogObserver
from observers.errors import PluginLoadError
from observers.formats import Format
from observers.protocol import (
    ObserverFactory,
)

if TYPE_CHECKING:  # the Spark observer's modules load only when it is chosen
    from observers.builtin.spark.session.session import SparkOptions


@dataclass(frozen=True, slots=True)
class ObserverChoice:
    """What `--observer` and the options of the observer it names chose, before anything is
    built: the host carries it without knowing what any observer needs."""

    spec: str  # log, jsonl:DIR, spark or module:Name
    spark: SparkOptions | None = None  # with `spark`
    fmt: Format = Format.NATIVE  # the JSON shape of the jsonl observer's lines


def load_observer_factory(choice: ObserverChoice, *, host_name: str) -> ObserverFactory:
    """The factory `--observer SPEC` names. Errors: `PluginLoadError` naming what is wrong.

    A factory may also be an async context manager (the Spark one is: one session per host);
    the host enters it before the first lease and leaves it after the last."""
    spec, spark, fmt = choice.spec, choice.spark, choice.fmt
    if fmt is not Format.NATIVE and not spec.startswith("jsonl:"):
        raise PluginLoadError(spec, f"--format {fmt.value} is for the jsonl observer only")
    if spec == "log":
        return LogObserver
    if spec == "spark":
        if spark is None:
            raise PluginLoadError(spec, "needs --output (and --spark-master or --spark-remote)")
        from observers.builtin.spark.observer import SparkObserverFactory  # noqa: PLC0415

        return SparkObserverFactory(spark, host_name=host_name)
    if spec.startswith("jsonl:"):
        directory = spec[len("jsonl:") :]
        if not directory:
            raise PluginLoadError(spec, "jsonl needs a directory: jsonl:DIR")
        return lambda: JsonlObserver(directory, host_name=host_name, fmt=fmt)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise PluginLoadError(spec, "expected log, jsonl:DIR, spark or module:Name")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise PluginLoadError(spec, f"cannot import {module_name}: {e}") from e
    target = getattr(module, attr, None)
    if target is None:
        raise PluginLoadError(spec, f"{module_name} has no attribute {attr}")
    if inspect.isclass(target) and not (
        callable(getattr(target, "process_changes", None))
        or callable(getattr(target, "process_arrow", None))
    ):
        raise PluginLoadError(spec, f"{attr} has no process_changes or process_arrow method")
    if not callable(target):
        raise PluginLoadError(spec, f"{attr} is neither a class nor a factory")
    factory: Callable[[], Any] = target
    return factory
