"""Signalling and reaping whole process trees, so that no task leaves a process behind.

Every task runs in its own session (its process group id is its pid). The agent is also made a
*child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``), so a grandchild that double-forks or calls
``setsid`` is re-parented to the agent instead of init and can still be found and killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

import psutil

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux only); False where the kernel does not support it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def descendants() -> list[psutil.Process]:
    """Every living descendant of this process (tasks, their children, adopted orphans)."""
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Signal a task's process group; a group that is already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def signal_tree(pgids: list[int], sig: signal.Signals) -> None:
    """Signal the given process groups and every descendant of this process, at the same moment."""
    for pgid in pgids:
        signal_group(pgid, sig)
    for proc in descendants():
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def parse_signal(name: str) -> signal.Signals:
    """``"SIGTERM"``, ``"TERM"`` or ``"15"`` to a signal; ValueError otherwise."""
    text = name.strip().upper()
    if text.isdigit():
        return signal.Signals(int(text))
    if not text.startswith("SIG"):
        text = "SIG" + text
    try:
        return signal.Signals[text]
    except KeyError:
        raise ValueError(f"unknown signal {name!r}") from None
