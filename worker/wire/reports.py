"""What a task may write on its report pipe, for both ends: :mod:`worker.reporting` sends, the
agent checks each line here (:func:`parse_report`), and the bootstrap shortens a traceback to fit
(:func:`fit_traceback`).

A report line is one UTF-8 JSON object with a non-empty string ``kind``; its other fields are the
report's data, nested at most :data:`MAX_DEPTH` deep. The kinds the agent acts on are checked field
by field: ``progress`` needs an integer ``step`` from 0 to :data:`MAX_STEP` and, if present, an
object ``metrics`` and the count ``dropped_metrics`` of metrics the sender left out to keep the line
within :data:`MAX_PROGRESS_LINE_BYTES`; ``error`` needs a string ``traceback``. Any other kind
(``ready``, ``restore_failed``, ...) is relayed as is.

:func:`parse_report` returns a typed report or raises :class:`BadReport` saying why, and nothing
else: whatever bytes a task writes, they cannot stop the agent.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any


class ReportKind(str, Enum):
    """The kinds of report a task sends and both ends understand (the one list of them)."""

    PROGRESS = "progress"  # worker.report(step, **metrics)
    ERROR = "error"  # the traceback of the exception the task dies of (worker.runtime.bootstrap)
    READY = "ready"  # the bootstrap is up: stack dumps can be asked for
    RESTORE_FAILED = "restore_failed"  # the resume checkpoint could not be restored
    PREEMPTED = "preempted"  # a preemption notice was seen: every task saves and stops
    EXPORTED = "exported"  # the chief saved a model (worker.save_model): path and format
    #: The task got a preemption notice after finishing ``step`` and holds there until the
    #: coordinator's stop step comes back on its control pipe (:mod:`worker.wire.control`).
    PREEMPTION_NOTICE = "preemption_notice"
    #: The task's helpers know the job's stop ``step``: it will not train past it.
    STOP_ACK = "stop_ack"


#: The longest report line the agent reads; a longer one is dropped whole. Only the fatal
#: traceback comes near it, and the bootstrap shortens that to fit (:func:`fit_traceback`).
MAX_REPORT_LINE_BYTES = 1024 * 1024
#: ``worker.report`` keeps a progress line within this many bytes (about 1500 metrics with names of
#: 40 characters); beyond it, it keeps the step and leaves out the metrics that do not fit.
MAX_PROGRESS_LINE_BYTES = 128 * 1024
#: The largest step a report may carry: TensorBoard (and TensorFlow) keep steps as int64.
MAX_STEP = 2**63 - 1
#: A traceback is kept to this many characters: its head and its last
#: :data:`TRACEBACK_TAIL_CHARS`, where the exception's own line is.
MAX_TRACEBACK_CHARS = 256 * 1024
TRACEBACK_TAIL_CHARS = 16 * 1024

#: Deeper data is refused: it could not be re-encoded without exhausting Python's recursion limit.
MAX_DEPTH = 32


class BadReport(ValueError):
    """A report line that is not a valid report."""


@dataclass(frozen=True)
class StepReport:
    """``worker.report(step, **metrics)``: the task finished training step ``step``."""

    step: int
    metrics: dict[str, Any]
    #: Metrics the sender left out to keep the line within :data:`MAX_PROGRESS_LINE_BYTES`.
    dropped_metrics: int = 0


@dataclass(frozen=True)
class FailureReport:
    """The traceback of the exception the task is dying of (sent by the bootstrap)."""

    traceback: str


@dataclass(frozen=True)
class OtherReport:
    """Any other kind, relayed to the coordinator as a ``TaskReport``."""

    kind: str
    data: dict[str, Any]


Report = StepReport | FailureReport | OtherReport


def parse_report(raw: bytes) -> Report:
    """The report on one line (without its newline); BadReport if it is not one."""
    try:
        message = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BadReport(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, too many digits, too deep
        raise BadReport(f"not JSON ({exc})") from None
    if not isinstance(message, dict):
        raise BadReport(f"a JSON {type(message).__name__}, not an object")
    # every level of nesting opens with a bracket of its own: a line with few brackets (every
    # progress report) cannot nest too deep, and is not walked
    if raw.count(b"{") + raw.count(b"[") > MAX_DEPTH and _depth(message) > MAX_DEPTH:
        raise BadReport(f"nested more than {MAX_DEPTH} deep")
    kind = message.pop("kind", None)
    if not isinstance(kind, str) or not kind:
        raise BadReport(f"'kind' must be a non-empty string, not {_show(kind)}")
    if kind == ReportKind.PROGRESS:
        return StepReport(step=_step(message.get("step")), metrics=_metrics(message.get("metrics")),
                          dropped_metrics=_dropped(message.get("dropped_metrics", 0)))
    if kind == ReportKind.ERROR:
        traceback = message.get("traceback")
        if not isinstance(traceback, str):
            raise BadReport(f"error 'traceback' must be a string, not {_show(traceback)}")
        return FailureReport(traceback=traceback)
    return OtherReport(kind=kind, data=message)


def _step(value: object) -> int:
    step: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        step = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        step = int(value)
    if step is None or not 0 <= step <= MAX_STEP:
        raise BadReport(f"progress 'step' must be an integer from 0 to 2**63-1, not {_show(value)}")
    return step


def _dropped(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_STEP:
        return value
    raise BadReport(f"progress 'dropped_metrics' must be a count, not {_show(value)}")


def _metrics(value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadReport(f"progress 'metrics' must be an object, not {_show(value)}")
    return value


def _depth(value: object) -> int:
    """How deeply lists and objects nest in ``value`` (without recursion)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:
            stack.extend((child, level + 1) for child in children)
    return deepest


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


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
