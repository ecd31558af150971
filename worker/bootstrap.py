"""Runs a task's Python entrypoint the way ``python -m MODULE`` / ``python SCRIPT`` would, plus:

- the traceback of an uncaught exception is sent to the agent (like torchelastic's error file, but
  without a decorator the user must remember), then printed as usual; a huge one is sent shortened
  to its head and its tail, which holds the exception's own line;
- ``SIGUSR1`` makes the task write every thread's Python stack to its stderr (faulthandler), which
  the agent uses to show where a hung task is stuck;
- the agent is told the task is ready and supports stack dumps.

Usage: ``python -m worker.bootstrap -m MODULE [ARGS...]`` or ``python -m worker.bootstrap SCRIPT
[ARGS...]``.
"""

from __future__ import annotations

import faulthandler
import os
import runpy
import signal
import sys
import traceback
from types import TracebackType

from worker import reporting
from worker.task_reports import ReportKind

STACK_DUMP_SIGNAL = signal.SIGUSR1
_HIDDEN_FILES = {os.path.abspath(__file__), os.path.abspath(runpy.__file__), "<frozen runpy>"}


def enable_stack_dumps() -> None:
    """Make ``SIGUSR1`` dump all threads' stacks to stderr; safe to call more than once."""
    faulthandler.register(STACK_DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)


def _is_hidden(filename: str) -> bool:
    return filename in _HIDDEN_FILES or os.path.abspath(filename) in _HIDDEN_FILES


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """Skip the launcher's own frames (this module, runpy) at the top of a traceback."""
    while tb is not None and _is_hidden(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    tb = _user_frames(tb)
    text = "".join(traceback.format_exception(kind, value, tb))
    reporting.send({"kind": ReportKind.ERROR.value, "traceback": reporting.fit_traceback(text)})
    sys.__excepthook__(kind, value, tb)


def main(argv: list[str]) -> None:
    if not argv or argv == ["-m"]:
        sys.exit("usage: python -m worker.bootstrap (-m MODULE | SCRIPT) [ARGS...]")
    enable_stack_dumps()
    sys.excepthook = _excepthook
    reporting.send({"kind": ReportKind.READY.value, "pid": os.getpid(), "stack_dumps": True})
    if argv[0] == "-m":
        module, args = argv[1], argv[2:]
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, args = argv[0], argv[1:]
        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
