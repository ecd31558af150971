"""The agent's hold on its tasks' process trees (Linux), and the rule it signals by.

Every task runs in its own session (its process group id is its pid), with ``PR_SET_PDEATHSIG`` set
to SIGKILL so that it dies with the agent. The agent is a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``), so a grandchild that double-forks or calls ``setsid`` is re-parented
to the agent instead of init, and stays findable among the agent's descendants.

**Only provably ours is ever signalled.** A pid is reused once its process is reaped, so:

- a task's process group is signalled only while the task is our *unreaped* child (alive or a
  zombie): until we reap it, the kernel gives its pid, and so its group id, to no one else
  (:meth:`worker.agent.task_process.TaskProcess.signal_group`);
- everything else is reached as a descendant of this process, each one pinned by a pidfd after it
  was found (:func:`signal_descendants`), so a process that ends meanwhile is not replaced by a
  stranger with its pid.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import shutil
import signal
import sys
from collections.abc import Callable, Collection

from worker.wire.process_identity import PinnedProcess, ProcStat, descendants, snapshot

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux only); False where the kernel does not support it."""
    libc = _libc()
    try:
        return libc is not None and int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except AttributeError:
        return False


def die_with_this_process() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive SIGKILL when this process dies; None where
    the platform cannot do it.

    Python's ``subprocess`` has no option for ``PR_SET_PDEATHSIG`` (3.11 added ``process_group``,
    nothing for this), so it runs in the child between fork and exec. ``preexec_fn`` is unsafe
    only in a process with several threads, and the agent has one. The death signal fires when
    the *thread* that forked the child exits: here that is the agent's only thread, so the agent
    itself. If the agent died before ``prctl`` took effect, the child is already re-parented and
    kills itself at once.
    """
    libc = _libc()
    if libc is None or not hasattr(libc, "prctl"):
        return None
    parent = os.getpid()
    prctl = libc.prctl

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


#: util-linux's ``setpriv`` sets ``PR_SET_PDEATHSIG`` and execs the task: with it the task is
#: spawned with vfork, without the fork of the whole agent that a ``preexec_fn`` forces (about
#: 2 ms a task here, a tenth of a trivial task's start-up).
_SETPRIV = ("/usr/bin/setpriv", "/bin/setpriv")


@functools.cache
def _setpriv() -> str | None:
    return next((path for path in _SETPRIV if os.access(path, os.X_OK)), None)


class NotExecutable(OSError):
    """The program of a task's argv is not found, or not executable (what ``exec`` would say)."""


def dying_with_this_process(argv: list[str], path: str | None, cwd: str
                            ) -> tuple[list[str], Callable[[], None] | None]:
    """``argv`` and ``preexec_fn`` for ``Popen`` so that the child dies with this process:
    through ``setpriv --pdeathsig KILL`` where util-linux has it (which execs ``argv`` as given;
    ``argv[0]`` is looked up first on ``path``, the child's PATH, so that a missing program is
    still a :class:`NotExecutable` at once rather than setpriv's exit 127), else
    :func:`die_with_this_process`. Should this process die between the spawn and setpriv's
    ``prctl`` (microseconds), the child outlives it: the process table
    (:mod:`worker.wire.process_table`) still names it, and it is killed from there."""
    setpriv = _setpriv()
    if setpriv is None or not argv:
        return argv, die_with_this_process()
    program = argv[0]
    if "/" in program:
        full = os.path.join(cwd, program)
        found = full if os.path.isfile(full) and os.access(full, os.X_OK) else None
    else:
        found = shutil.which(program, path=path if path is not None else os.defpath)
    if found is None:
        raise NotExecutable(errno.ENOENT, os.strerror(errno.ENOENT), program)
    return [setpriv, "--pdeathsig", "KILL", "--", *argv], None


def has_children() -> bool:
    """Whether this process has a child, running or not yet reaped: one system call, where
    :func:`own_descendants` reads every process's ``/proc`` entry."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def own_descendants() -> list[ProcStat]:
    """Every process below this one: tasks, their children, adopted orphans (zombies too).
    Without a child there is none (every descendant is below one; an orphan is adopted by this
    subreaper as a child of its own), and ``/proc`` is not read: the common end of an attempt,
    every task reaped, costs no scan."""
    if not has_children():
        return []
    return descendants(snapshot(), os.getpid())


def own_descendants_but(kept: Collection[int]) -> list[ProcStat]:
    """:func:`own_descendants` without the processes ``kept`` (pids of our own unreaped
    children, e.g. warm spares) and everything below them."""
    found = own_descendants()
    if not kept:
        return found
    skipped = set(kept)
    left = []
    for stat in found:  # parents come first
        if stat.pid in skipped or stat.ppid in skipped:
            skipped.add(stat.pid)
        else:
            left.append(stat)
    return left


def signal_descendants(sig: signal.Signals, kept: Collection[int] = ()) -> None:
    """Send ``sig`` to every descendant of this process but ``kept`` and theirs, each pinned
    first (see the module doc)."""
    for stat in own_descendants_but(kept):
        pinned = PinnedProcess.pin(stat.pid, stat.start_ticks)
        if pinned is not None:
            pinned.signal(sig)
            pinned.close()


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
