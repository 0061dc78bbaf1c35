"""`--observer` turned into a factory: the built-ins, a module of the user's, and clear errors."""

from __future__ import annotations

import pytest

from observers import (
    PluginLoadError,
)
from observers.builtin.jsonl import JsonlObserver
from observers.builtin.log import LogObserver
from processor.plugins import ObserverChoice, load_observer_factory


def test_built_in_and_module_observers_load() -> None:
    assert load_observer_factory(ObserverChoice("log"), host_name="h") is LogObserver
    assert isinstance(
        load_observer_factory(ObserverChoice("jsonl:/tmp/x"), host_name="h")(), JsonlObserver
    )
    assert (
        load_observer_factory(ObserverChoice("tests.plugins:PacedJsonl"), host_name="h").__name__
        == "PacedJsonl"
    )


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("nope", "expected log, jsonl:DIR, spark or module:Name"),
        ("jsonl:", "needs a directory"),
        ("no_such_module_x:Thing", "cannot import"),
        ("tests.plugins:Missing", "has no attribute Missing"),
        ("json:dumps", None),  # a callable factory is accepted at load time
        ("observers.protocol:CloseReason", "has no process_changes"),
        ("spark", "needs --output"),
    ],
)
def test_bad_observer_specs_say_what_is_wrong(spec: str, problem: str | None) -> None:
    if problem is None:
        load_observer_factory(ObserverChoice(spec), host_name="h")
        return
    with pytest.raises(PluginLoadError, match=problem):
        load_observer_factory(ObserverChoice(spec), host_name="h")
