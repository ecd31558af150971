"""The crash a drill injects: ``crash`` faults send
:data:`~worker.wire.signals.CRASH_SIGNAL` to a task, and a Python entrypoint (started by
``python -m worker.runtime.bootstrap`` or from a warm spare: both go through
:func:`worker.runtime.task_entry.run`) turns it into an :class:`InjectedCrash` raised in its main
thread, so it dies like a training step that raised (exit code 1, a traceback relayed to the
agent).

A ``command:`` entrypoint keeps the signal's default action: it is killed by ``SIGPWR``, still a
crash. Python runs signal handlers between bytecodes of the main thread: a main thread blocked
inside a long native call (a TensorFlow collective) raises when that call returns.
"""

from __future__ import annotations

import signal
from types import FrameType

from worker.wire.signals import CRASH_SIGNAL


class InjectedCrash(RuntimeError):
    """Raised in a task's main thread when a drill sends :data:`CRASH_SIGNAL`."""


def _raise(signum: int, _frame: FrameType | None) -> None:
    raise InjectedCrash(f"tfcluster drill: crash injected ({signal.Signals(signum).name})")


def enable_crash_signal() -> None:
    """Make :data:`CRASH_SIGNAL` raise :class:`InjectedCrash`; safe to call more than once."""
    signal.signal(CRASH_SIGNAL, _raise)
