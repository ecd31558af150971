"""pydantic's validation errors turned into :class:`~launcher.spec.errors.SpecProblem` lines a
person can act on (field path, what was expected, what was given, a close match for a typo)."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from launcher.spec.errors import FieldProblems, SpecProblem
from launcher.spec.limits import show_number, show_text, text_problem
from launcher.spec.model import ClusterSpec

_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def translate(error: ErrorDetails) -> list[SpecProblem]:
    loc = list(error["loc"])
    kind, ctx, value = error["type"], error.get("ctx", {}), error["input"]
    is_key = bool(loc) and loc[-1] == "[key]"
    if is_key:
        loc.pop()
    path = _format_path(loc)
    cause = ctx.get("error")
    if isinstance(cause, FieldProblems):
        return [SpecProblem(_join(path, sub), message) for sub, message in cause.problems]
    if kind == "extra_forbidden":
        return [SpecProblem(path, _unknown_field(loc))]
    if kind == "missing":
        return [SpecProblem(path, "required field is missing")]
    if kind == "literal_error":
        allowed = ", ".join(re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
        return [SpecProblem(path, f"must be one of {allowed} (got {_describe(value)})")]
    if kind == "string_unicode":
        problem = text_problem(value) if isinstance(value, str) else None
        return [SpecProblem(path, problem or "must be valid Unicode text")]
    if kind == "float_type" and isinstance(value, int) and not isinstance(value, bool):
        return [SpecProblem(path, f"is too large a number (got {_describe(value)})")]
    if kind in _TYPE_WORDS:
        subject = "the key must be" if is_key else "must be"
        return [SpecProblem(path, f"{subject} {_TYPE_WORDS[kind]} (got {_describe(value)})")]
    bounds = {
        "greater_than": ">",
        "greater_than_equal": ">=",
        "less_than": "<",
        "less_than_equal": "<=",
    }
    if kind in bounds:
        limit = next(iter(ctx.values()))
        if isinstance(limit, float) and limit.is_integer() and abs(limit) < 2**53:
            limit = int(limit)
        return [SpecProblem(path, f"must be {bounds[kind]} {limit} (got {_describe(value)})")]
    if kind in ("string_too_short", "too_short") and ctx.get("min_length") == 1:
        return [SpecProblem(path, "must not be empty")]
    if kind == "finite_number":
        return [SpecProblem(path, f"must be a finite number (got {_describe(value)})")]
    if cause is not None:
        return [SpecProblem(path, str(cause))]
    message = error["msg"]
    return [SpecProblem(path, message[:1].lower() + message[1:])]


def _format_path(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
            continue
        # a key with control characters (a NUL, a newline) is shown escaped, as Python quotes it
        name = part if part and part.isprintable() else repr(part)
        path += f".{name}" if path else name
    return path


def _join(path: str, sub: str) -> str:
    return f"{path}.{sub}" if path and sub else path or sub


def _unknown_field(loc: Sequence[int | str]) -> str:
    model = _model_at(loc[:-1])
    if model is None:
        return "unknown field"
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    known = f"did you mean {close[0]!r}?" if close else "known: " + ", ".join(model.model_fields)
    return f"unknown field ({known})"


def _model_at(loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The model that data at ``loc`` is validated against (list indices, dict keys skipped)."""
    model: type[BaseModel] | None = ClusterSpec
    for part in loc:
        if model is None:
            return None
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is not None:
            model = _inner_model(field.annotation)
    return model


def _inner_model(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list, dict, Annotated):
        for arg in typing.get_args(annotation):
            found = _inner_model(arg)
            if found is not None:
                return found
    return None


def kind_of(value: object) -> str:
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else type(value).__name__


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return show_text(value)
    if isinstance(value, int | float):
        return show_number(value)
    return f"a {kind_of(value)}"
