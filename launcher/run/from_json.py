"""Typed values from JSON read back from a run directory, checked against a dataclass's annotations.

What a run recorded is read back as untrusted (a file can be torn, edited or written by another
tfcluster), so :func:`build` checks every field it fills: a value of the wrong kind raises
:class:`RecordError` naming where it was found, never a ``TypeError`` deep inside a reader. Keys
the dataclass does not know are ignored (a newer tfcluster may record more); a missing key takes
the field's default, or is an error when the field has none.

Understood annotations: ``Any``, ``bool``, ``int``, ``float`` (an int is accepted), ``str``,
``None``, unions, ``Sequence[X]`` / ``tuple[X, ...]`` (a JSON array, kept as a tuple),
``Mapping[K, V]`` / ``dict[K, V]`` (a JSON object), enums (by value), a class with a
``from_dict`` class method, and nested dataclasses.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


class RecordError(ValueError):
    """A recorded value is not what its field holds (``<where>: expected <kind>, got <value>``)
    or is missing (``<where>: missing``)."""

    def __init__(self, where: str, expected: str, value: object) -> None:
        self.where, self.expected = where, expected
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        super().__init__(f"{where}: missing" if value is _MISSING
                         else f"{where}: expected {expected}, got {shown}")

    @classmethod
    def missing(cls, where: str) -> RecordError:
        return cls(where, "a value", _MISSING)


#: Stands for a key the record lacks.
_MISSING = object()


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of ``cls`` (cached: events are read by the thousand)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def build(cls: type[T], data: object, where: str) -> T:
    """An instance of the dataclass ``cls`` from the JSON object ``data``."""
    if not isinstance(data, Mapping):
        raise RecordError(where, "an object", data)
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not field.init:
            continue
        if field.name not in data:
            if field.default is dataclasses.MISSING and \
                    field.default_factory is dataclasses.MISSING:
                raise RecordError.missing(f"{where}.{field.name}")
            continue
        values[field.name] = convert(hints[field.name], data[field.name], f"{where}.{field.name}")
    return cls(**values)


def convert(hint: Any, value: object, where: str) -> Any:
    """``value`` as the annotation ``hint`` describes it (see the module docstring)."""
    if hint is Any or hint is object:
        return value
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return _union(typing.get_args(hint), value, where)
    if hint is None or hint is type(None):
        if value is None:
            return None
        raise RecordError(where, "null", value)
    if origin in (Sequence, tuple, list):
        return _sequence(hint, value, where)
    if origin in (Mapping, dict):
        return _mapping(hint, value, where)
    if isinstance(hint, type):
        return _plain(hint, value, where)
    raise TypeError(f"{where}: cannot read back a field annotated {hint!r}")


def _union(options: tuple[Any, ...], value: object, where: str) -> Any:
    expected = []
    for option in options:
        try:
            return convert(option, value, where)
        except RecordError as exc:
            expected.append(exc.expected)
    raise RecordError(where, " or ".join(expected), value)


def _sequence(hint: Any, value: object, where: str) -> tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise RecordError(where, "an array", value)
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and args and args[-1] is not Ellipsis:
        if len(args) != len(value):
            raise RecordError(where, f"an array of {len(args)}", value)
        return tuple(convert(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
    item = args[0] if args else Any
    return tuple(convert(item, v, f"{where}[{i}]") for i, v in enumerate(value))


def _mapping(hint: Any, value: object, where: str) -> dict[Any, Any]:
    if not isinstance(value, Mapping):
        raise RecordError(where, "an object", value)
    key, item = typing.get_args(hint) or (Any, Any)
    return {convert(key, k, where): convert(item, v, f"{where}[{k!r}]") for k, v in value.items()}


def _plain(hint: type, value: object, where: str) -> Any:
    from_dict: Callable[[Mapping[str, Any]], Any] | None = getattr(hint, "from_dict", None)
    if from_dict is not None:
        if not isinstance(value, Mapping):
            raise RecordError(where, "an object", value)
        return from_dict(value)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, where)
    if issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise RecordError(where, f"one of {[m.value for m in hint]}", value) from None
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, bool):
        raise RecordError(where, "int", value)
    if isinstance(value, hint):
        return value
    raise RecordError(where, hint.__name__, value)
