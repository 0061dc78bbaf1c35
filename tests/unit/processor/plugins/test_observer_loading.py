"""`--observer` (and `--observer-option`) turned into a factory: the built-ins, a module of the
user's, options declared and typed, and clear errors."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from observers import ArrowBatch, PartitionContext, PluginHost, PluginLoadError
from observers.builtin.jsonl import JsonlObserver
from observers.builtin.log import LogObserver
from observers.builtin.spark.observer import SparkObserverFactory
from processor.connection import DEFAULT_CONNECTION_STRING, storage_access
from processor.plugins import ObserverChoice, load_observer_factory
from tests.unit.fakes import ArchiveOptions, Shape

HOST = PluginHost(
    "h",
    "p",
    DEFAULT_CONNECTION_STRING,
    lambda: datetime.now(UTC),
    lambda conn: storage_access(conn or DEFAULT_CONNECTION_STRING),
)


def test_built_in_and_module_observers_load() -> None:
    assert load_observer_factory(ObserverChoice("log"), host=HOST) is LogObserver
    assert isinstance(
        load_observer_factory(ObserverChoice("jsonl:/tmp/x"), host=HOST)(), JsonlObserver
    )
    assert (
        load_observer_factory(ObserverChoice("tests.plugins:PacedJsonl"), host=HOST).__name__
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
        load_observer_factory(ObserverChoice(spec), host=HOST)
        return
    with pytest.raises(PluginLoadError, match=problem):
        load_observer_factory(ObserverChoice(spec), host=HOST)


class Archive:
    Options = ArchiveOptions

    def __init__(self, options: ArchiveOptions) -> None:
        self.options = options

    def process_arrow(self, ctx: PartitionContext, batch: ArrowBatch) -> None: ...


class SharedArchive:
    """A factory that takes options: made once per host, with them and the host."""

    Options = ArchiveOptions

    def __init__(self, options: ArchiveOptions, host: PluginHost) -> None:
        self.options, self.host = options, host

    def __call__(self) -> Archive:
        return Archive(self.options)


@pytest.fixture
def plugin_module() -> Iterator[str]:
    module = types.ModuleType("cfp_test_archive")
    module.Archive = Archive  # type: ignore[attr-defined]
    module.SharedArchive = SharedArchive  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module.__name__
    del sys.modules[module.__name__]


def load(spec: str, *options: str) -> object:
    return load_observer_factory(ObserverChoice(spec, options), host=HOST)


def test_an_observer_class_gets_its_options_typed_for_each_lease(plugin_module: str) -> None:
    factory = load(
        f"{plugin_module}:Archive",
        "directory=/tmp/a", "rows=20", "ratio=0.25", "compress=false", "shape=narrow",
        "prefix=x", "columns=id", "columns=event_type",
    )  # fmt: skip
    first, second = factory(), factory()  # type: ignore[operator]
    assert first is not second and first.options is second.options
    assert first.options == ArchiveOptions(
        Path("/tmp/a"), 20, 0.25, False, Shape.NARROW, "x", ("id", "event_type")
    )


def test_a_factory_that_takes_options_is_made_once_with_the_host(plugin_module: str) -> None:
    factory = load(f"{plugin_module}:SharedArchive", "directory=/tmp/b", "shape=WIDE")
    assert isinstance(factory, SharedArchive) and factory.host is HOST
    assert factory.options == ArchiveOptions(Path("/tmp/b"), shape=Shape.WIDE)
    assert isinstance(factory(), Archive)


def test_options_for_a_plugin_without_options_are_refused() -> None:
    with pytest.raises(PluginLoadError, match="LogObserver takes no options"):
        load("log", "level=debug")


def test_jsonl_takes_its_directory_and_format_as_options(tmp_path: Path) -> None:
    observer = load(f"jsonl:{tmp_path}")()  # type: ignore[operator]
    assert isinstance(observer, JsonlObserver) and observer.options.directory == tmp_path
    with pytest.raises(PluginLoadError, match="option 'format': 'yaml' is not one of native"):
        load(f"jsonl:{tmp_path}", "format=yaml")


def test_the_spark_observer_takes_its_settings_as_options(tmp_path: Path) -> None:
    """`cfp run`'s Spark flags reach it this same way (`--output` is `output=`)."""
    factory = load("spark", f"output={tmp_path}", "spark_max_rows=500", "history=false")
    assert isinstance(factory, SparkObserverFactory)
    options = factory.options
    assert options.output.local == tmp_path.resolve() and options.max_rows == 500
    assert not options.keep_history and options.master == "local[*]"
    assert options.feed is not None and options.feed.account == "devstoreaccount1"
    assert factory.dead_letter_dir == str(tmp_path.resolve() / "dead-letter")


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (("output=s3://bucket/x",), "s3://"),
        (("output=/tmp/x", "spark_max_rows=ten"), "option 'spark_max_rows': 'ten' is not an"),
        (("output=/tmp/x", "spark_conf=spark.jars.packages=x"), "nothing may be downloaded"),
    ],
)
def test_spark_options_that_do_not_fit_are_refused(options: tuple[str, ...], problem: str) -> None:
    with pytest.raises(PluginLoadError, match=problem):
        load("spark", *options)
