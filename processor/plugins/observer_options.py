"""A plugin's declared options, made from `--observer-option KEY=VALUE` strings: each value
converted to its field's type, and every mistake refused with an error that names the option.

A plugin declares its options as a dataclass, its `Options` attribute (see `observers.options`).
The conversions are pure and known in advance: str, int, float, bool, `pathlib.Path`, an `Enum`
(by value or name), `X | None` of one of those, and `tuple[X, ...]` (the key given once per
value). Nothing else is guessed at.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from observers.errors import PluginLoadError
from observers.protocol import TakesOptions

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})


def declared_options(target: object) -> type | None:
    """The dataclass `target` declares as its `Options`, or None: it takes no options."""
    if not isinstance(target, TakesOptions):
        return None
    declared = target.Options
    if not (isinstance(declared, type) and dataclasses.is_dataclass(declared)):
        raise TypeError(f"{getattr(target, '__name__', target)}.Options is not a dataclass")
    return declared


def option_pairs(pairs: Sequence[str], *, spec: str) -> dict[str, list[str]]:
    """`KEY=VALUE` strings by key (`-` in a key read as `_`), each key's values in order."""
    found: dict[str, list[str]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise PluginLoadError(spec, f"--observer-option {pair!r}: expected KEY=VALUE")
        found.setdefault(key.strip().replace("-", "_"), []).append(value)
    return found


def make_options(declared: type, pairs: Sequence[str], *, spec: str) -> Any:
    """An instance of `declared` from `pairs`. Errors: `PluginLoadError` naming the option (an
    unknown one with the options there are, a missing one with its type, a value that does not
    convert, a single-valued option given twice)."""
    given = option_pairs(pairs, spec=spec)
    fields = {f.name: f for f in dataclasses.fields(declared) if f.init}
    unknown = sorted(set(given) - set(fields))
    if unknown:
        takes = ", ".join(fields) or "none"
        raise PluginLoadError(spec, f"unknown option {unknown[0]!r}; the options are: {takes}")
    hints = typing.get_type_hints(declared)
    values: dict[str, Any] = {}
    for name, f in fields.items():
        if name in given:
            values[name] = _value(hints[name], given[name], name=name, spec=spec)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            wanted = _type_name(hints[name])
            raise PluginLoadError(spec, f"option {name!r} ({wanted}) is required")
    try:
        return declared(**values)
    except (TypeError, ValueError) as e:  # the plugin's own checks (__post_init__)
        raise PluginLoadError(spec, f"options: {e}") from e


def _value(hint: Any, texts: list[str], *, name: str, spec: str) -> Any:
    item = _tuple_item(hint)
    if item is not None:
        return tuple(_convert(item, text, name=name, spec=spec) for text in texts)
    if len(texts) > 1:
        raise PluginLoadError(spec, f"option {name!r} is given {len(texts)} times; it takes one")
    return _convert(hint, texts[0], name=name, spec=spec)


def _tuple_item(hint: Any) -> Any | None:
    """`X` of `tuple[X, ...]`, or None."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return None


def _convert(hint: Any, text: str, *, name: str, spec: str) -> Any:
    """`text` as a `hint`. Errors: `PluginLoadError`."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        if len(args) != 1:
            raise PluginLoadError(spec, f"option {name!r}: a union of {args} is not supported")
        return _convert(args[0], text, name=name, spec=spec)
    try:
        return _scalar(hint, text)
    except ValueError:
        raise PluginLoadError(
            spec, f"option {name!r}: {text!r} is not {_type_name(hint)}"
        ) from None


def _scalar(hint: Any, text: str) -> Any:
    if hint is bool:
        if text.strip().lower() not in TRUE | FALSE:
            raise ValueError(text)
        return text.strip().lower() in TRUE
    if hint in (str, int, float, Path):
        return hint(text)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        for member in hint:
            if text in (str(member.value), member.name):
                return member
        raise ValueError(text)
    raise ValueError(f"no conversion to {hint!r}")


def _type_name(hint: Any) -> str:
    item = _tuple_item(hint)
    if item is not None:
        return f"one or more of {_type_name(item)}"
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if args and len(args) == 1:
        return _type_name(args[0])
    if hint is bool:
        return "a boolean (true/false)"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in hint)
    names = {str: "a string", int: "an integer", float: "a number", Path: "a path"}
    return names.get(hint, repr(hint))
