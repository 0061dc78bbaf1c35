"""A plugin's declared options made from `KEY=VALUE` strings: typed values, and every mistake
refused with an error that names the option."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observers import PluginLoadError
from processor.plugins.observer_options import declared_options, make_options, option_pairs
from tests.unit.fakes import ArchiveOptions, Shape


def make(*pairs: str) -> ArchiveOptions:
    made: ArchiveOptions = make_options(ArchiveOptions, pairs, spec="plugin:Archive")
    return made


def test_every_kind_of_value_is_converted_to_its_fields_type() -> None:
    made = make(
        "directory=/data", "rows=20", "ratio=0.25", "compress=off", "shape=NARROW",
        "prefix=x", "columns=id", "columns=event_type",
    )  # fmt: skip
    assert made == ArchiveOptions(
        Path("/data"), 20, 0.25, False, Shape.NARROW, "x", ("id", "event_type")
    )
    assert make("directory=/d") == ArchiveOptions(Path("/d"))


@pytest.mark.parametrize(
    ("pairs", "problem"),
    [
        ((), "option 'directory' \\(a path\\) is required"),
        (("directory=/x", "rowz=3"), "unknown option 'rowz'; the options are: directory, rows,"),
        (("directory=/x", "rows=many"), "option 'rows': 'many' is not an integer"),
        (("directory=/x", "compress=maybe"), "option 'compress': 'maybe' is not a boolean"),
        (("directory=/x", "shape=round"), "'round' is not one of wide, narrow"),
        (("directory=/x", "rows=1", "rows=2"), "option 'rows' is given 2 times"),
        (("directory",), "--observer-option 'directory': expected KEY=VALUE"),
        (("directory=/x", "rows=0"), "options: rows must be at least 1"),
    ],
)
def test_options_that_do_not_fit_are_refused_by_name(pairs: tuple[str, ...], problem: str) -> None:
    with pytest.raises(PluginLoadError, match=problem) as refused:
        make(*pairs)
    assert "plugin:Archive" in str(refused.value)  # and the plugin they were meant for


@given(st.integers(), st.floats(allow_nan=False, allow_infinity=False))
def test_numbers_read_back_as_given(rows: int, ratio: float) -> None:
    made: ArchiveOptions = make_options(
        ArchiveOptions, ["directory=/d", f"rows={max(rows, 1)}", f"ratio={ratio!r}"], spec="p"
    )
    assert (made.rows, made.ratio) == (max(rows, 1), ratio)


def test_keys_are_grouped_in_order_and_dashes_read_as_underscores() -> None:
    assert option_pairs(["max-rows=1", "a=x=y", "max_rows=2"], spec="p") == {
        "max_rows": ["1", "2"],
        "a": ["x=y"],
    }


def test_only_a_dataclass_declares_options() -> None:
    class Declares:
        Options = ArchiveOptions

    class NotADataclass:
        class Options:
            rows: int = 1

    assert declared_options(Declares) is ArchiveOptions
    assert declared_options(object()) is None
    with pytest.raises(TypeError, match=r"NotADataclass\.Options is not a dataclass"):
        declared_options(NotADataclass)
