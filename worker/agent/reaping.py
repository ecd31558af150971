"""Reaping the agent's children in two steps, so that a task's death can be looked at before its
``/proc`` entry goes: :func:`next_exit` names an exited child without reaping it (``WNOWAIT``),
:func:`reap` collects it with its resource usage (its peak RSS: ``ru_maxrss``)."""

from __future__ import annotations

import os
import signal

#: ``ru_maxrss`` is in KiB on Linux.
_KIB = 1024


def next_exit() -> tuple[int, bool] | None:
    """An exited child not yet reaped, and whether SIGKILL killed it; None when there is none."""
    try:
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None or info.si_pid == 0:
        return None
    killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) and info.si_status == signal.SIGKILL
    return info.si_pid, killed


def reap(pid: int) -> tuple[int, int | None] | None:
    """Reap ``pid``, which has exited: its wait status and peak RSS in bytes (None if unknown);
    None if it was reaped already (by a wait of its own owner)."""
    try:
        _, status, usage = os.wait4(pid, 0)  # it has exited: this does not block
    except ChildProcessError:
        return None
    peak = usage.ru_maxrss * _KIB
    return status, peak or None
