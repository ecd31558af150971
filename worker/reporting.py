"""The channel from a training task to its agent: progress, readiness and the fatal traceback.

The agent gives every task the write end of a pipe and names it in ``TFCLUSTER_REPORT_FD``. Each
message is one JSON line written whole under a lock, so a training script may report from several
threads (lines longer than PIPE_BUF are not atomic across processes: a forked child should not
report on its parent's pipe). Outside tfcluster the variable is absent and every function here does
nothing (but :func:`report` still checks its step), so scripts run unchanged on a laptop. This
module sends; the line's format, its limits and the agent's check are :mod:`worker.wire.reports`.

:func:`report` only queues its step and metrics: a thread converts and writes them, batched
(:mod:`worker.report_queue`: at most one write per 0.25 s, a newer report replacing an older unsent
one with the same metric names), so a training step does not wait for the pipe. Every other
message (:func:`send`) and the interpreter's exit first write the reports still pending, and
:func:`flush` does so for code that must have the last step out before it goes on.

A progress report is kept within :data:`~worker.wire.reports.MAX_PROGRESS_LINE_BYTES` (room for
about 1500 metrics): a wider one keeps its step and the metrics that fit, says how many it left out
(counted in ``summary.json``), and the task's log says so once.
"""

from __future__ import annotations

import json
import math
import operator
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from worker.report_queue import Pending, ReportQueue
from worker.wire.env import REPORT_FD as REPORT_FD_ENV
from worker.wire.reports import (
    MAX_PROGRESS_LINE_BYTES,
    MAX_REPORT_LINE_BYTES,
    MAX_STEP,
    ReportKind,
)

_lock = threading.Lock()
#: ``broken``: set once the agent is gone (stay silent from then on); ``trimmed_told``: the log
#: has said that a report was too wide (it says so once).
_state = {"broken": False, "trimmed_told": False}


def _fd() -> int | None:
    raw = os.environ.get(REPORT_FD_ENV)
    if not raw or _state["broken"]:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def send(message: Mapping[str, Any]) -> bool:
    """Write one message to the agent, after the progress reports still pending; False when not
    under tfcluster or the agent is gone."""
    _queue.flush()
    fd = _fd()
    if fd is None:
        return False
    line = _encode(message) + b"\n"
    if len(line) > MAX_REPORT_LINE_BYTES:  # the agent would drop it whole
        return False
    return _write(fd, line)


def flush() -> None:
    """Write the progress reports still pending now (they go out within about 0.25 s anyway):
    for code that must have the last step out before it saves, exits or blocks."""
    _queue.flush()


def _write(fd: int, data: bytes) -> bool:
    with _lock:
        try:
            while data:  # a write into a pipe can be cut short by a signal
                data = data[os.write(fd, data):]
        except OSError:
            _state["broken"] = True  # agent gone or fd closed by the script
            return False
    return True


def _write_batch(batch: list[Pending]) -> None:
    """The sender's write of pending progress reports: converted, bounded, in one write."""
    fd = _fd()
    if fd is None:
        return
    lines = []
    for step, metrics in batch:
        clean = {name: _plain(value) for name, value in metrics.items()}
        lines.append(_encode(_within_bounds(step, clean)) + b"\n")
    _write(fd, b"".join(lines))


def _plain(value: Any) -> Any:
    if isinstance(value, int | float):
        return _finite(value)
    try:
        return _finite(_jsonable(value))
    except Exception as exc:  # e.g. a tensor whose value cannot be read any more
        return f"<unreadable: {type(exc).__name__}>"


_queue = ReportQueue(_write_batch)


def _encode(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), default=_jsonable).encode()


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
    steps. It only queues the report (a thread reads tensor and numpy values and writes it within
    about 0.25 s; a newer report with the same metric names replaces one not yet written) and does
    nothing when not run by tfcluster. ``step`` must be a whole number from 0 to 2**63-1
    (TypeError or ValueError otherwise, under tfcluster or not).
    """
    number = checked_step(step)
    if _fd() is None:
        return
    _queue.put(number, metrics)


def checked_step(step: Any) -> int:
    """``step`` as an int (a numpy integer or a scalar tensor will do); TypeError if it is not a
    whole number, ValueError if it is out of 0..2**63-1 (what TensorBoard can store)."""
    if isinstance(step, bool):
        raise TypeError(f"worker.report: step must be a whole number (the training step), not "
                        f"{step!r}")
    try:
        number = operator.index(step)
    except TypeError:
        plain = step if isinstance(step, float) else _jsonable(step)
        if isinstance(plain, float) and math.isfinite(plain) and plain.is_integer():
            number = int(plain)
        elif isinstance(plain, int) and not isinstance(plain, bool):
            number = plain
        else:
            shown = repr(step)
            raise TypeError("worker.report: step must be a whole number (the training step), "
                            f"not {shown if len(shown) <= 60 else shown[:57] + '...'}") from None
    if not 0 <= number <= MAX_STEP:
        raise ValueError(f"worker.report: step {number} is out of range: a step is a whole "
                         "number from 0 to 2**63-1")
    return number


def _within_bounds(step: int, metrics: dict[str, Any]) -> dict[str, Any]:
    """The progress message, within :data:`MAX_PROGRESS_LINE_BYTES`: the step always, and the
    metrics that fit (in the order given) with the count of those left out."""
    message: dict[str, Any] = {"kind": ReportKind.PROGRESS.value, "step": step, "metrics": metrics}
    size = len(_encode(message)) + 1
    if size <= MAX_PROGRESS_LINE_BYTES:
        return message
    bare = {**message, "metrics": {}, "dropped_metrics": len(metrics)}
    room = MAX_PROGRESS_LINE_BYTES - len(_encode(bare)) - 1
    kept: dict[str, Any] = {}
    for name, value in metrics.items():
        cost = len(_encode({name: value})) - 2 + (1 if kept else 0)  # without braces; a comma
        if cost <= room:
            kept[name] = value
            room -= cost
    left_out = len(metrics) - len(kept)
    if not _state["trimmed_told"]:
        _state["trimmed_told"] = True
        print(f"tfcluster: worker.report(step={step}) carried {len(metrics)} metrics in {size} "
              f"bytes, more than a report holds ({MAX_PROGRESS_LINE_BYTES} bytes): left out "
              f"{left_out} of them (said once; what every report left out is counted in "
              "summary.json, metrics.dropped.metrics_over_size)", file=sys.stderr, flush=True)
    return {**message, "metrics": kept, "dropped_metrics": left_out}
