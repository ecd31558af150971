"""The channel from a training task to its agent: progress, readiness and the fatal traceback.

The agent gives every task the write end of a pipe and names it in ``TFCLUSTER_REPORT_FD``. Each
message is one JSON line written with a single ``os.write`` (atomic for lines under PIPE_BUF), so a
training script may report from several threads. Outside tfcluster the variable is absent and every
function here does nothing, so scripts run unchanged on a laptop.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Mapping
from typing import Any

from worker.env import REPORT_FD as REPORT_FD_ENV
from worker.task_reports import ReportKind

#: Keep lines below PIPE_BUF (4096 on Linux) so that concurrent writers never interleave.
_MAX_LINE = 4000
#: The longest report line the agent reads; a longer one is dropped whole. Only the fatal
#: traceback comes near it, and the bootstrap shortens that to fit (:func:`fit_traceback`).
MAX_REPORT_LINE_BYTES = 1024 * 1024
#: A traceback is kept to this many characters: its head and its last
#: :data:`TRACEBACK_TAIL_CHARS`, where the exception's own line is.
MAX_TRACEBACK_CHARS = 256 * 1024
TRACEBACK_TAIL_CHARS = 16 * 1024

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


def shorten_middle(text: str, max_chars: int, tail_chars: int = TRACEBACK_TAIL_CHARS) -> str:
    """``text`` itself if it has at most ``max_chars`` characters, else its head and its last
    ``tail_chars`` characters (fewer if ``max_chars`` is smaller) around a note of what was cut."""
    if len(text) <= max_chars:
        return text
    tail = min(tail_chars, max_chars // 2)
    head = max_chars - tail
    cut = len(text) - head - tail
    return f"{text[:head]}\n[tfcluster] ... {cut} characters cut ...\n{text[len(text) - tail:]}"


def fit_traceback(text: str) -> str:
    """``text`` shortened (:func:`shorten_middle`) so that its ``error`` report line stays within
    :data:`MAX_REPORT_LINE_BYTES` however much JSON escaping it needs."""
    max_chars = MAX_TRACEBACK_CHARS
    while True:
        short = shorten_middle(text, max_chars)
        line = json.dumps({"kind": ReportKind.ERROR.value, "traceback": short}, separators=(",", ":"))
        if len(line) < MAX_REPORT_LINE_BYTES or max_chars <= TRACEBACK_TAIL_CHARS:
            return short
        max_chars //= 2


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
