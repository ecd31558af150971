"""The mark of a job's processes: what proves, once their agent is dead, that a process is the job's.

Every process an agent starts (tasks, warm spares) gets ``TFCLUSTER_PROCESS_MARK=<mark>`` in the
environment it is started with, and so does everything they start in turn unless it clears its
environment. The mark names one run directory and one host (:func:`process_mark`); the coordinator
computes it and sends it in the launch (``Launch.process_mark``), never through the run directory.

**Why a mark proves something.** ``/proc/PID/environ`` is the environment the process was started
with: the kernel fixed it at ``exec``, and only whoever started the process chose it. Nothing a
task, a stranger or a file in the run directory says can put the mark into the environment of a
process that already runs; so a process that carries it was started by a process that had it,
that is by this job (or by a process the job started on purpose). The mark need not be secret:
knowing it lets one start *new* processes that carry it, never mark one of the user's own. Only
processes of this user are looked at (another user's environment cannot be read, nor could we
signal them), and a mark is unique per run directory and host, so a job never takes another
job's processes, nor one host's agent another's on a shared machine.
"""

from __future__ import annotations

import os
from pathlib import Path

from worker.wire.env import PROCESS_MARK
from worker.wire.process_identity import ProcStat, snapshot

_PROC = Path("/proc")


def process_mark(run_dir: str, host: str) -> str:
    """The mark of the processes that ``host``'s agent starts for the run in ``run_dir``: the same
    for every attempt and for ``--resume`` of that run directory, different for any other."""
    import hashlib  # here: it loads OpenSSL, which the coordinator's start-up does without

    where = os.path.realpath(run_dir)
    return hashlib.sha256(f"tfcluster-process-mark\0{where}\0{host}".encode()).hexdigest()[:32]


def carries(pid: int, mark: str) -> bool:
    """Whether process ``pid`` was started with ``mark`` in its environment (False if it is gone,
    not ours, or its environment cannot be read). Check that the process is still the one
    meant *after* this call (a pidfd's ``alive()``) before relying on the answer."""
    try:
        raw = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{PROCESS_MARK}={mark}".encode() in raw.split(b"\0")


def marked(mark: str) -> list[ProcStat]:
    """Every live process of this user but this one that carries ``mark`` (unpinned: pin each
    and check again before signalling it)."""
    found = []
    uid, own = os.getuid(), os.getpid()
    for stat in snapshot().values():
        if stat.pid == own or stat.zombie:
            continue
        try:
            if (_PROC / str(stat.pid)).stat().st_uid != uid:
                continue
        except OSError:
            continue
        if carries(stat.pid, mark):
            found.append(stat)
    return found
