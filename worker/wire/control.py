"""The control pipe, from an agent to one of its tasks: the one thing the coordinator tells a
running task, the step after which the whole job stops on a preemption notice.

The agent gives every task the read end of a pipe and names it in ``TFCLUSTER_CONTROL_FD``
(:data:`worker.wire.env.CONTROL_FD`); it writes one JSON line per :class:`~worker.wire.protocol.StopAt`
it gets, ``{"stop_at": STEP}``. The task's helpers read it in a thread (:mod:`worker.stop_step`)
and answer on their report pipe with a ``stop_ack`` report of the same step; a task that got the
notice itself says so with a ``preemption_notice`` report of the step it has just finished.
"""

from __future__ import annotations

import json

from worker.wire.reports import MAX_STEP

#: The longest control line a task reads; a longer one is not a control line.
MAX_CONTROL_LINE_BYTES = 256


class BadControlLine(ValueError):
    """A line on the control pipe that is not a stop step."""


def encode_stop_at(step: int) -> bytes:
    """The control line telling a task that the job stops after ``step``."""
    return json.dumps({"stop_at": step}, separators=(",", ":")).encode() + b"\n"


def parse_stop_at(line: bytes) -> int:
    """The stop step on one control line (without its newline); BadControlLine if there is none."""
    try:
        message = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadControlLine(f"not a JSON line ({exc})") from None
    step = message.get("stop_at") if isinstance(message, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= MAX_STEP:
        raise BadControlLine(f"no stop step in {line[:80]!r}")
    return step
