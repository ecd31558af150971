"""Waiting for a child process to exit, woken by the exit itself.

``subprocess.Popen.wait(timeout)`` polls on POSIX: it sleeps between ``waitpid(WNOHANG)`` calls,
up to 50 ms at a time, so a process that exits early in a sleep is seen late (tfcluster waits for
its agents like this at the end of every run). A pidfd (Linux 5.3) becomes readable the moment the
process exits: :func:`wait_exit` waits on it with ``poll`` and only then reaps.
"""

from __future__ import annotations

import os
import select
import subprocess


def wait_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """``proc``'s exit code (reaped) as soon as it exits, or None if it is still running after
    ``timeout_s``. Falls back to ``Popen.wait(timeout)`` where pidfds are not available."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd here (old kernel, not Linux), or already reaped
        return _polling_wait(proc, timeout_s)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.poll(max(timeout_s, 0.0) * 1000)  # retried after a signal (PEP 475)
    finally:
        os.close(pidfd)
    return proc.poll()


def _polling_wait(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    try:
        return proc.wait(max(timeout_s, 0.0))
    except subprocess.TimeoutExpired:
        return None
