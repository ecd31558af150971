"""JSON as tfcluster writes it into a run directory: strict JSON that any reader parses.

Python's ``json`` writes a float NaN or infinity as a bare ``NaN`` / ``Infinity``, which is not
JSON (``jq``, JavaScript and most other readers refuse the whole file). A task's loss that
diverged is such a float, so every value written goes through :func:`dumps`: a non-finite float
becomes ``null`` (it carries no number a reader could use), and nothing else changes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any


def finite_only(value: Any) -> Any:
    """``value`` with every non-finite float in it (nested in dicts, lists and tuples) null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_only(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_only(item) for item in value]
    return value


def dumps(value: Any, *, default: Callable[[Any], Any] | None = None, **options: Any) -> str:
    """``json.dumps`` that never writes ``NaN`` or ``Infinity`` (they become null). The common
    case costs one encoding: the value is only walked when it holds a non-finite float."""
    try:
        return json.dumps(value, allow_nan=False, default=default, **options)
    except ValueError as exc:
        if "Out of range float" not in str(exc):
            raise
    return json.dumps(finite_only(value), allow_nan=False, default=default, **options)
