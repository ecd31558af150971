"""A task's CPU time and its time waiting for a CPU, for telling why a lock-step job is slow.

Under MultiWorkerMirroredStrategy every task waits in each step's all-reduce for the slowest, so
their step rates are equal and say nothing. What differs is what each did in between:

- **CPU time** (user + system, all threads, ``/proc/PID/stat`` through psutil): a task with more
  work per step uses more of it than its peers, which idle in the collective meanwhile;
- **run-queue wait** (the second field of ``/proc/PID/task/TID/schedstat``: time runnable but not
  running): a task on a host (or a core) crowded by other work waits for a CPU.

The kernel keeps run-queue wait per thread, and a thread's figures go with it when it exits, so
:class:`RunQueueWait` keeps the last figure of each thread and adds up how much each grew: the sum
only ever grows. Reading costs one small file per thread per heartbeat (measured in the issue 24
note: ``benchmarks/run_all.py``).
"""

from __future__ import annotations

import os

_NS = 1e-9


def _thread_waits(tasks_fd: int) -> dict[int, int] | None:
    """Each thread's run-queue wait so far, nanoseconds, from the process's ``/proc/PID/task``
    directory (open as ``tasks_fd``); None if the process is gone."""
    try:
        threads = os.listdir(tasks_fd)
    except OSError:
        return None
    waits: dict[int, int] = {}
    for tid in threads:
        try:
            fd = os.open(f"{tid}/schedstat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=tasks_fd)
        except OSError:
            continue  # the thread just exited
        try:
            fields = os.read(fd, 128).split()
        except OSError:
            continue
        finally:
            os.close(fd)
        if len(fields) >= 2 and fields[1].isdigit():
            waits[int(tid)] = int(fields[1])
    return waits or None  # no thread readable: no schedstat here


class RunQueueWait:
    """How long the threads of one process have waited for a CPU, in all, since it started."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._last: dict[int, int] = {}
        self._total_ns = 0
        try:  # held open: the directory of this very process, whatever pid it names later
            self._fd: int | None = os.open(f"/proc/{pid}/task",
                                           os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            self._fd = None

    def read(self) -> float | None:
        """Seconds waited so far (all threads, those gone included); None when unreadable."""
        waits = None if self._fd is None else _thread_waits(self._fd)
        if waits is None:
            return None
        for tid, wait in waits.items():
            self._total_ns += max(0, wait - self._last.get(tid, 0))
        self._last = waits
        return self._total_ns * _NS

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
