"""Becoming a task: run its Python entrypoint the way ``python -m MODULE`` / ``python SCRIPT`` would,
plus what tfcluster adds to every Python task:

- the traceback of an uncaught exception is sent to the agent (like torchelastic's error file, but
  without a decorator the user must remember), then printed as usual; a huge one is sent shortened
  to its head and its tail, which holds the exception's own line;
- ``SIGUSR1`` makes the task write every thread's Python stack to its stderr (faulthandler), which
  the agent uses to show where a hung task is stuck;
- the agent is told the task is ready and supports stack dumps.

Two ways in, one way through: a cold start (``python -m worker.runtime.bootstrap ENTRY...``) and
a warm spare that has just been handed its launch (``python -m worker.runtime.spare``) both call
:func:`run`, so the entrypoint cannot tell them apart. The entry argv is ``-m MODULE [ARGS...]`` or
``SCRIPT [ARGS...]``. This module is the only one of tfcluster's that both have imported.
"""

from __future__ import annotations

import faulthandler
import os
import runpy
import sys
import traceback
from collections.abc import Sequence
from types import TracebackType

from worker import reporting
from worker.runtime.crash import enable_crash_signal
from worker.wire.reports import ReportKind, fit_traceback
from worker.wire.signals import STACK_DUMP_SIGNAL

USAGE = "usage: python -m worker.runtime.bootstrap (-m MODULE | SCRIPT) [ARGS...]"
_HERE = os.path.dirname(os.path.abspath(__file__))
#: The frames of tfcluster's way in, hidden at the top of a task's traceback.
_HIDDEN_FILES = {
    os.path.abspath(__file__),
    os.path.join(_HERE, "bootstrap.py"),
    os.path.join(_HERE, "spare.py"),
    os.path.join(os.path.dirname(_HERE), "wire", "module_start.py"),
    "<string>",  # the ``python -c`` line that started it (worker.wire.module_start)
    os.path.abspath(runpy.__file__),
    "<frozen runpy>",
}


def is_entry_argv(argv: Sequence[str]) -> bool:
    """Whether ``argv`` names an entrypoint: ``-m MODULE [ARGS...]`` or ``SCRIPT [ARGS...]``."""
    return bool(argv) and list(argv) != ["-m"]


def entry_path0(argv: Sequence[str], cwd: str) -> str:
    """``sys.path[0]`` of the task ``argv`` started in ``cwd``: the cwd for a module (as
    ``python -m`` gives it), the script's directory for a script."""
    cwd = os.path.abspath(cwd)
    if argv[0] == "-m":
        return cwd
    return os.path.dirname(os.path.abspath(os.path.join(cwd, argv[0])))


def set_sys_for(argv: Sequence[str]) -> None:
    """``sys.argv`` (and, for a script, ``sys.path[0]``) as the entrypoint ``argv`` starts with;
    runpy then puts a module's file in ``sys.argv[0]``."""
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))


def enable_stack_dumps() -> None:
    """Make ``SIGUSR1`` dump all threads' stacks to stderr; safe to call more than once."""
    faulthandler.register(STACK_DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)


def _is_hidden(filename: str) -> bool:
    return filename in _HIDDEN_FILES or os.path.abspath(filename) in _HIDDEN_FILES


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """Skip the launcher's own frames (bootstrap, spare, this module, runpy) at the top."""
    while tb is not None and _is_hidden(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    """Send the traceback without the launcher's frames, then print it (without them too: the
    interpreter prints ``value.__traceback__``, whatever ``tb`` it is given)."""
    tb = _user_frames(tb)
    text = "".join(traceback.format_exception(kind, value, tb))
    reporting.send({"kind": ReportKind.ERROR.value, "traceback": fit_traceback(text)})
    sys.__excepthook__(kind, value.with_traceback(tb), tb)


def run(argv: Sequence[str]) -> None:
    """Become the task ``argv`` (an entry argv, see :func:`is_entry_argv`) in this process: stack
    dumps, a drill's crash signal raising, the traceback relay, the ``ready`` report, then its code
    as ``__main__``."""
    enable_stack_dumps()
    enable_crash_signal()
    sys.excepthook = _excepthook
    reporting.send({"kind": ReportKind.READY.value, "pid": os.getpid(), "stack_dumps": True})
    set_sys_for(argv)
    if argv[0] == "-m":
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(argv[0], run_name="__main__")
