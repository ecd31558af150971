"""Fields of a record read back from a run directory (an ``events.jsonl`` line, a part of
``summary.json``), taken one at a time by what a reader needs of them: a value of the wrong type
(a string step, NaN, ``1e300`` as a time) is :class:`FieldError` naming the field, or, for a
figure only shown, nothing (``-``). No reader formats an unchecked value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from launcher.run.events import MAX_TS


class FieldError(ValueError):
    """``<event>.<field>: expected <kind>, got <value>`` (or ``<event>.<field>: missing``)."""

    def __init__(self, where: str, expected: str, value: object, *, missing: bool = False) -> None:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        super().__init__(f"{where}: missing" if missing
                         else f"{where}: expected {expected}, got {shown}")


def number(value: object) -> float | None:
    """A finite number, else None (a figure that cannot be shown is not shown)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        as_float = float(value)
    except OverflowError:  # an int beyond any float
        return None
    return as_float if math.isfinite(as_float) else None


def integer(value: object) -> int | None:
    """An int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def mapping(value: object) -> Mapping[str, Any]:
    """An object, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def text(value: object) -> str | None:
    """A string, else None."""
    return value if isinstance(value, str) else None


class Fields:
    """The fields of one record (an ``events.jsonl`` object), checked as they are taken."""

    def __init__(self, record: Mapping[str, Any]) -> None:
        self.record = record
        self.kind = str(record.get("event"))

    def where(self, name: str) -> str:
        return f"{self.kind}.{name}"

    def ts(self) -> float:
        """The record's time: epoch seconds a calendar can show."""
        value = number(self.record.get("ts"))
        if value is None or not 0 <= value < MAX_TS:
            raise FieldError(self.where("ts"), "a time", self.record.get("ts"))
        return value

    def whole(self, name: str, *, required: bool = False) -> int | None:
        value = self.record.get(name)
        if value is None and not required:
            return None
        if name not in self.record:
            raise FieldError(self.where(name), "int", None, missing=True)
        if integer(value) is None:
            raise FieldError(self.where(name), "int", value)
        return integer(value)

    def figure(self, name: str) -> float | None:
        value = self.record.get(name)
        if value is None:
            return None
        if number(value) is None:
            raise FieldError(self.where(name), "a number", value)
        return number(value)

    def string(self, name: str) -> str | None:
        value = self.record.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise FieldError(self.where(name), "str", value)
        return value

    def flag(self, name: str) -> bool | None:
        value = self.record.get(name)
        if value is not None and not isinstance(value, bool):
            raise FieldError(self.where(name), "true or false", value)
        return value

    def obj(self, name: str) -> Mapping[str, Any]:
        value = self.record.get(name)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise FieldError(self.where(name), "an object", value)
        return value
