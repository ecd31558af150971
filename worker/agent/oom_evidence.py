"""Whether a task that died of SIGKILL was the kernel's out-of-memory victim, and its memory limit.

Where the agent may read the kernel's log (``/dev/kmsg``: root, or ``dmesg_restrict`` off), the OOM
killer's own record says it: ``oom-kill:...,oom_memcg=/GROUP,...,pid=PID,...``, naming the victim and
the memory cgroup whose limit it hit (v1 ``memory.limit_in_bytes``, v2 ``memory.max``; "/" is the
host's memory). The agent opens the log at its start, from its end, and reads what is new when a
task dies of SIGKILL (the record is written before the kill). Elsewhere (a container, a user
without the right) it falls back on the count of OOM kills the kernel keeps in ``/proc/vmstat``
(``oom_kill``), noted whenever a task is sampled (its start and every heartbeat): a SIGKILL that
comes with a higher count was most likely an OOM kill, and the limit is its cgroup's as
``/proc/PID/cgroup`` still shows it. All of this is read, never written, and a kernel without
these files only means "unknown" (``None``).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
_CGROUP_ROOT = Path("/sys/fs/cgroup")
#: cgroup v1 writes a "no limit" as the largest page-aligned 64-bit value; anything this large is none.
_NO_LIMIT = 1 << 62


def host_oom_kills(proc: Path = _PROC) -> int | None:
    """How many processes the kernel's OOM killer has killed on this host since boot."""
    try:
        stats = (proc / "vmstat").read_bytes()
        start = stats.index(b"\noom_kill ") + len(b"\noom_kill ")
        return int(stats[start:stats.index(b"\n", start)])
    except (OSError, ValueError):  # no such file, or no such line
        return None


def memory_cgroup(pid: int, proc: Path = _PROC, root: Path = _CGROUP_ROOT) -> Path | None:
    """The directory of ``pid``'s memory cgroup: the v1 ``memory`` hierarchy's, else the unified
    (v2) one's when it has memory control."""
    try:
        lines = (proc / str(pid) / "cgroup").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    unified = None
    for line in lines:
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if "memory" in controllers.split(","):
            return root / "memory" / path.lstrip("/")
        if controllers == "" and line.startswith("0::"):
            unified = root / path.lstrip("/")
    if unified is not None and (unified / "memory.max").exists():
        return unified
    return None


def cgroup_limit(directory: Path) -> int | None:
    """The memory limit of the cgroup at ``directory`` in bytes, or None when it has none."""
    for name in ("memory.limit_in_bytes", "memory.max"):
        with contextlib.suppress(OSError, ValueError):
            text = (directory / name).read_text(encoding="ascii").strip()
            if text == "max":
                return None
            limit = int(text)
            return None if limit >= _NO_LIMIT else limit
    return None


@dataclass(frozen=True)
class MemoryEvidence:
    """What the kernel says of a task's death: OOM-killed (None: cannot tell) and the limit of its
    memory cgroup (None: none, the host's memory is its limit)."""

    oom_killed: bool | None
    limit_bytes: int | None


#: The OOM killer's record of a victim: its memory cgroup ("/" for the host) and pid.
_OOM_RECORD = re.compile(rb"oom-kill:.*?\boom_memcg=([^,]*),.*?\bpid=(\d+),")
#: Victims remembered from the kernel's log at most (the oldest are forgotten first).
_MAX_VICTIMS = 256


class KernelLog:
    """The OOM killer's records in ``/dev/kmsg`` from when the agent started; unusable (and then
    never read) where the agent may not read the kernel's log."""

    def __init__(self, path: str = "/dev/kmsg") -> None:
        self.victims: dict[int, str] = {}
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.lseek(self._fd, 0, os.SEEK_END)
        except OSError:
            self._fd = None

    @property
    def readable(self) -> bool:
        return self._fd is not None

    def victim(self, pid: int) -> str | None:
        """The memory cgroup of ``pid`` if the OOM killer killed it since the agent started."""
        self._read_new()
        return self.victims.get(pid)

    def _read_new(self) -> None:
        while self._fd is not None:
            try:
                record = os.read(self._fd, 8192)  # one record per read
            except BlockingIOError:
                return
            except BrokenPipeError:
                continue  # records were overwritten before we read them: go on with the next
            except OSError:
                return
            if not record:
                return
            if (found := _OOM_RECORD.search(record)) is not None:
                self.victims[int(found[2])] = found[1].decode("utf-8", "replace")
                while len(self.victims) > _MAX_VICTIMS:
                    del self.victims[next(iter(self.victims))]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def group_limit(memcg: str, root: Path = _CGROUP_ROOT) -> int | None:
    """The limit of the memory cgroup the kernel's log names (v1 hierarchy, else v2)."""
    if memcg in ("", "/"):
        return None
    for directory in (root / "memory" / memcg.lstrip("/"), root / memcg.lstrip("/")):
        if (limit := cgroup_limit(directory)) is not None:
            return limit
    return None


class OomWatch:
    """What the kernel says of a task's SIGKILL: its log's OOM records where readable, else the
    host's OOM kill count as of the task's last sample."""

    def __init__(self, log: KernelLog | None = None) -> None:
        self._seen: dict[int, int | None] = {}
        self.log = KernelLog() if log is None else log

    def sample(self, pids: Iterable[int]) -> None:
        """Note the count now, once for all of ``pids``: they are alive (just started, or
        sampled for a heartbeat). Nothing to note where the kernel's log says it."""
        if self.log.readable:
            return
        count = host_oom_kills()
        for pid in pids:
            self._seen[pid] = count

    def evidence(self, pid: int, killed: bool) -> MemoryEvidence | None:
        """For ``pid``, exited but not yet reaped: whether a SIGKILL (``killed``) was an OOM kill,
        and its memory cgroup's limit. None for any other death (nothing to say)."""
        before = self._seen.pop(pid, None)
        if not killed:
            return None
        if self.log.readable:
            memcg = self.log.victim(pid)
            return MemoryEvidence(oom_killed=memcg is not None,
                                  limit_bytes=None if memcg is None else group_limit(memcg))
        now = host_oom_kills()
        directory = memory_cgroup(pid)
        limit = None if directory is None else cgroup_limit(directory)
        oom = None if before is None or now is None else now > before
        return MemoryEvidence(oom_killed=oom, limit_bytes=limit)

    def forget(self, pid: int) -> None:
        self._seen.pop(pid, None)
