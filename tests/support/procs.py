"""Finding, waiting for and killing processes with psutil: the pieces the test support modules
(tests.support.jobs, tests.ssh, tests.netns) and the benchmarks build their process checks from.

Every function here treats a process that vanished or became a zombie meanwhile as gone."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable

import psutil

#: Longest single ``psutil.wait_procs`` call while waiting, so new processes are noticed too.
POLL_S = 0.2


def alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` that still exist and are not zombies."""
    found = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def by_pid(pids: Iterable[int]) -> list[psutil.Process]:
    """A ``psutil.Process`` for each pid that still exists."""
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            found.append(psutil.Process(pid))
    return found


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except psutil.Error:
        return {}


def with_env(var: str, value: str) -> list[psutil.Process]:
    """Every live process whose environment has ``var=value``."""
    return alive(proc for proc in psutil.process_iter() if _environ(proc).get(var) == value)


def wait_until_empty(probe: Callable[[], list[psutil.Process]],
                     timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` for ``probe()`` to find no process; returns what it found last
    (empty unless the deadline passed)."""
    deadline = time.monotonic() + timeout
    while True:
        left = probe()
        now = time.monotonic()
        if not left or now >= deadline:
            return left
        psutil.wait_procs(left, timeout=min(POLL_S, deadline - now))


def kill_all(procs: Iterable[psutil.Process], timeout: float | None = 5.0) -> list[int]:
    """SIGKILL every one of ``procs``, then wait up to ``timeout`` for them to end (``None``: do
    not wait, e.g. when one is a ``subprocess.Popen`` child whose exit code is still wanted).
    Returns their pids."""
    procs = list(procs)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    if timeout is not None:
        psutil.wait_procs(procs, timeout=timeout)
    return [proc.pid for proc in procs]
