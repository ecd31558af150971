"""What the root-cause block shows of a failure's evidence: the exception first, and the known
problems that a traceback gives away, each named with its fix.

A Python traceback ends with the exception, but its message can be long: Keras 3 under MWMS fails
with ``ValueError: Attempt to convert a value (PerReplica:{`` followed by every value of a batch,
so the last 30 lines of the traceback were array values and the exception line was cut off.
:func:`traceback_excerpt` puts the exception line first, then its message bounded (its first and
last lines), then the innermost frames that still fit. :func:`known_problem` matches the traceback
and stderr against :data:`KNOWN_PROBLEMS` (like the out-of-memory remedies of
:mod:`launcher.job.memory`, a cause tfcluster can name and a fix a user can apply).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: The line that starts each traceback Python prints (the last one is of the exception that ended
#: the program; earlier ones are those it was raised while handling).
TRACEBACK_HEADER = "Traceback (most recent call last):"
#: The exception's message shows at most this many of its first lines...
MESSAGE_HEAD_LINES = 2
#: ... and this many of its last (a long message says its cause at both ends).
MESSAGE_TAIL_LINES = 1
#: How a cut is marked.
_ELLIPSIS = "\u2026"


def traceback_excerpt(text: str, budget: int) -> list[str]:
    """At most ``budget`` lines of ``text`` (a Python traceback): the exception line, the rest of
    its message (bounded), then the header and the innermost frames that fit. Text that is not a
    traceback gives its last ``budget`` lines."""
    start = text.rfind(TRACEBACK_HEADER)
    block = text[start:].rstrip("\n").split("\n")[1:] if start >= 0 else []
    first = next((i for i, line in enumerate(block) if line and not line[0].isspace()), None)
    if first is None or budget < 3:
        return _last_lines(text, budget)
    frames, message = block[:first], block[first:]
    shown = [message[0], *_bounded_message(message[1:])]
    room = budget - len(shown) - 1
    if room <= 0 or not frames:
        return shown[:budget]
    if len(frames) > room:
        left_out = len(frames) - room + 1
        frames = [f"  {_ELLIPSIS} [{left_out} outer line(s), see the task log]",
                  *frames[left_out:]]
    return [*shown, TRACEBACK_HEADER, *frames]


def _bounded_message(rest: list[str]) -> list[str]:
    """The lines of an exception's message after its first: a few of each end when it is long."""
    head, tail = MESSAGE_HEAD_LINES - 1, MESSAGE_TAIL_LINES
    if len(rest) <= head + tail + 1:
        return rest
    return [*rest[:head],
            f"{_ELLIPSIS} [{len(rest) - head - tail} more line(s) of the message, see the task log]",
            *rest[len(rest) - tail:]]


def _last_lines(text: str, count: int) -> list[str]:
    lines = text.rstrip("\n").split("\n")
    return lines[-count:] if count > 0 else []


@dataclass(frozen=True)
class KnownProblem:
    """A failure tfcluster recognises from a task's traceback or stderr, and what to do."""

    name: str
    #: Every pattern must be found (in the traceback, or in the stderr lines).
    patterns: tuple[re.Pattern[str], ...]
    fix: str

    def matches(self, text: str) -> bool:
        return all(pattern.search(text) for pattern in self.patterns)

    def say(self) -> str:
        return f"Known problem: {self.name}. Fix: {self.fix}"


#: Keras 3 (``tf.keras`` since TF 2.16, or ``import keras``) fed a distributed dataset by MWMS.
KERAS3_MWMS = KnownProblem(
    name="Keras 3 (tf.keras since TensorFlow 2.16) does not support "
         "MultiWorkerMirroredStrategy in model.fit: it gets the strategy's PerReplica values",
    patterns=(re.compile(r"PerReplica"),
              re.compile(r"(?<!tf_)keras/src/")),  # Keras 3's package layout (not tf_keras')
    fix="use Keras 2: pip install tf_keras (the version of your TensorFlow) and set "
        "TF_USE_LEGACY_KERAS=1 in the tasks' environment (the spec's env:, or "
        "TF_USE_LEGACY_KERAS=1 tfcluster local ...); tf.keras is then tf_keras")

KNOWN_PROBLEMS: tuple[KnownProblem, ...] = (KERAS3_MWMS,)


def known_problem(traceback: str | None, stderr_tail: Sequence[str]) -> KnownProblem | None:
    """The known problem that the evidence shows, if any (the traceback when there is one)."""
    text = traceback if traceback else "\n".join(stderr_tail)
    return next((problem for problem in KNOWN_PROBLEMS if problem.matches(text)), None)
