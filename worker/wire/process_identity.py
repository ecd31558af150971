"""Naming a process so that a later process with the same pid is never mistaken for it (Linux).

A pid is free for reuse as soon as its process has been reaped (and no group or session is named
after it), so a bare pid is no proof of anything. Here a process is named by ``(pid, start_ticks)``:
``start_ticks`` is the kernel's start time of the process in clock ticks since boot (field 22 of
``/proc/PID/stat``). It is fixed for the life of the process, and a later process can only get the
same pid after the pid space has wrapped around, which takes far longer than one tick. It is valid
within one boot; :func:`boot_id` tells boots apart. (psutil's ``create_time`` is derived from it plus
the boot time as the *reading* process computes it, which can move by a second when the clock is
stepped, so it is not compared across processes.)

A :class:`PinnedProcess` goes one step further: it holds a pidfd, so a signal sent through it
reaches that very process or nothing, however soon its pid is reused. Kernels without pidfds
(before Linux 5.3) fall back to checking the start time right before each signal.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
#: More than ``/proc/PID/stat`` ever holds (52 numbers and a name of at most 64 bytes).
_STAT_MAX_BYTES = 4096
_BOOT_ID = _PROC / "sys" / "kernel" / "random" / "boot_id"


@dataclass(frozen=True)
class ProcStat:
    """What ``/proc/PID/stat`` says about one process, read in one go."""

    pid: int
    ppid: int
    sid: int
    start_ticks: int
    zombie: bool
    #: The state letter: ``R`` running, ``S`` asleep, ``D`` in a short kernel wait, ``Z``, ...
    state: str = ""


def _parse_stat(pid: int, raw: bytes) -> ProcStat | None:
    # "PID (COMM) STATE PPID PGRP SESSION ... STARTTIME ...": COMM may hold spaces and ")".
    fields = raw[raw.rfind(b")") + 2:].split()
    try:
        return ProcStat(pid=pid, ppid=int(fields[1]), sid=int(fields[3]),
                        start_ticks=int(fields[19]), zombie=fields[0] in (b"Z", b"X"),
                        state=fields[0].decode("ascii", "replace"))
    except (IndexError, ValueError):
        return None


def read_stat(pid: int) -> ProcStat | None:
    """The process ``pid`` as the kernel describes it now; None if there is none."""
    try:  # os.open: the agent reads it for each task starting, ten times a second and more
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.read(fd, _STAT_MAX_BYTES)  # one read: the kernel writes it whole
    except OSError:
        return None
    finally:
        os.close(fd)
    return _parse_stat(pid, raw)


def snapshot() -> dict[int, ProcStat]:
    """Every process of this pid namespace, by pid (empty where there is no ``/proc``)."""
    try:
        names = os.listdir(_PROC)
    except OSError:
        return {}
    found: dict[int, ProcStat] = {}
    for name in names:
        if name.isdigit():
            stat = read_stat(int(name))
            if stat is not None:
                found[stat.pid] = stat
    return found


def descendants(processes: dict[int, ProcStat], root: int) -> list[ProcStat]:
    """Every descendant of ``root`` in ``processes`` (a :func:`snapshot`), parents first."""
    children: dict[int, list[ProcStat]] = defaultdict(list)
    for stat in processes.values():
        children[stat.ppid].append(stat)
    found: list[ProcStat] = []
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        for child in children.get(pid, []):
            if child.pid != root:
                found.append(child)
                frontier.append(child.pid)
    return found


def boot_id() -> str:
    """This boot's random id ("" where the kernel does not say)."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


class PinnedProcess:
    """One process, held so that it cannot be confused with a later one: a pidfd where the kernel
    has them, else its start time, checked again before every signal. Close it when done."""

    def __init__(self, stat: ProcStat, pidfd: int | None) -> None:
        self.pid = stat.pid
        self.start_ticks = stat.start_ticks
        self._pidfd = pidfd

    @classmethod
    def pin(cls, pid: int, start_ticks: int) -> PinnedProcess | None:
        """Hold the process ``(pid, start_ticks)``; None if it is gone, a zombie or another one."""
        pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):  # no pidfds here, or no such pid
            pidfd = os.pidfd_open(pid)
        stat = read_stat(pid)  # read after opening: the pidfd names the process this describes
        if stat is None or stat.start_ticks != start_ticks or stat.zombie:
            if pidfd is not None:
                os.close(pidfd)
            return None
        return cls(stat, pidfd)

    def alive(self) -> bool:
        """True until the process exits (a zombie has exited)."""
        if self._pidfd is not None:
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            return not poller.poll(0)  # a pidfd turns readable when its process exits
        stat = read_stat(self.pid)
        return stat is not None and stat.start_ticks == self.start_ticks and not stat.zombie

    def current(self) -> ProcStat | None:
        """The process's stat now, or None once it has exited. It is checked to be alive *after*
        the read, so what the stat says (its parent, its session) was true of this process."""
        stat = read_stat(self.pid)
        if stat is None or stat.start_ticks != self.start_ticks or not self.alive():
            return None
        return stat

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to this process; nothing happens if it is gone."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            elif self.alive():
                os.kill(self.pid, sig)

    def close(self) -> None:
        """Release the pidfd; safe to call more than once."""
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
