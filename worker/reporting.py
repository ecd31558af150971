"""The channel from a training task to its agent: progress, readiness and the fatal traceback.

The agent gives every task the write end of a pipe and names it in ``TFCLUSTER_REPORT_FD``. Each
message is one JSON line written with a single ``os.write`` (atomic for lines under PIPE_BUF), so a
training script may report from several threads. Outside tfcluster the variable is absent and every
function here does nothing, so scripts run unchanged on a laptop. This module sends; the line's
format, its limits and the agent's check are :mod:`worker.wire.reports`.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Mapping
from typing import Any

from worker.wire.env import REPORT_FD as REPORT_FD_ENV
from worker.wire.reports import ReportKind

#: Keep lines below PIPE_BUF (4096 on Linux) so that concurrent writers never interleave.
_MAX_LINE = 4000

_lock = threading.Lock()
_state = {"broken": False}  # set once the agent is gone: stay silent from then on


def _fd() -> int | None:
    raw = os.environ.get(REPORT_FD_ENV)
    if not raw or _state["broken"]:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def send(message: Mapping[str, Any]) -> bool:
    """Write one message to the agent; False when not under tfcluster or the agent is gone."""
    fd = _fd()
    if fd is None:
        return False
    line = (json.dumps(message, separators=(",", ":"), default=_jsonable) + "\n").encode()
    if len(line) > _MAX_LINE and message.get("kind") != ReportKind.ERROR:
        return False
    with _lock:
        try:
            os.write(fd, line)
        except OSError:
            _state["broken"] = True  # agent gone or fd closed by the script
            return False
    return True


def _jsonable(value: Any) -> Any:
    """Turn numpy / TensorFlow scalars into plain numbers without importing either."""
    for attr in ("item", "numpy"):
        method = getattr(value, attr, None)
        if callable(method):
            return _finite(method())
    return str(value)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def report(step: int, **metrics: Any) -> None:
    """Tell tfcluster that this task finished training step ``step`` (with optional metrics).

    Progress drives hang detection and restart accounting, so call it once per step or every few
    steps. It costs one small pipe write and does nothing when not run by tfcluster.
    """
    clean = {name: _finite(_jsonable(v) if not isinstance(v, int | float) else v)
             for name, v in metrics.items()}
    send({"kind": ReportKind.PROGRESS.value, "step": int(step), "metrics": clean})
