"""The probe of this machine, started before it is needed.

A run on this machine is checked before anything starts (:func:`launcher.cli.start.check_local_hosts`):
the probe (:mod:`launcher.preflight.probe`) runs as a child process, and its interpreter's start
(~30 ms) lay on the way from the command to the first task. ``tfcluster run`` and ``local`` start
it beside the early agent (:mod:`launcher.backends.early_agent`), with ``-`` for its request: it
checks what does not depend on the run (Python, ``worker``, TensorFlow, GPUs) while tfcluster
imports and validates the spec, then waits for its request on stdin. The check of a local host
that would run this very probe (the same interpreter, in the same directory) sends it the request
instead of starting another (:meth:`EarlyProbe.take`); any other check runs its own probe, as
before. One that nobody took is killed when the command is done with it.

This module imports nothing of tfcluster until the probe starts, so that starting it costs the
command line no time.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Sequence

#: The probe's request argument that makes it read the request from stdin.
FROM_STDIN = "-"
#: Its nice value: the CPU goes to any other process first.
LOWEST_PRIORITY = 19


class EarlyProbe:
    """One probe process of ``python`` in ``cwd``, waiting for its request; safe to discard more
    than once, from any thread."""

    def __init__(self, python: str, cwd: str) -> None:
        from launcher.preflight.probe_code import PROBE

        self.python = python
        self.cwd = cwd
        self._code = PROBE
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        with contextlib.suppress(OSError):  # the probe run in its place will say what is wrong
            self._proc = subprocess.Popen([python, "-c", PROBE, FROM_STDIN], cwd=cwd,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE)
            # the lowest priority: it runs when a core is idle (the agent started early has
            # imported what it needs and waits), never in the way of tfcluster's own start
            os.setpriority(os.PRIO_PROCESS, self._proc.pid, LOWEST_PRIORITY)

    @property
    def pid(self) -> int | None:
        """The probe's pid while it waits to be taken; None once taken or discarded."""
        proc = self._proc
        return None if proc is None else proc.pid

    def take(self, argv: Sequence[str], cwd: str) -> subprocess.Popen[bytes] | None:
        """This probe with the request of ``argv`` sent to it, if ``argv`` run in ``cwd`` is the
        probe it runs (``PYTHON -c PROBE REQUEST``); None otherwise, or if it is gone. It is
        taken once: the caller reads its answer and waits for its exit."""
        with self._lock:
            proc = self._proc
            if proc is None or not self._runs(argv, cwd):
                return None
            self._proc = None
        stdin, proc.stdin = proc.stdin, None  # from here on, communicate() only reads
        assert stdin is not None  # PIPE
        try:
            stdin.write(argv[3].encode() + b"\n")  # JSON: no newline inside
            stdin.close()
        except OSError:  # it died: the caller runs a probe of its own, which says why
            with contextlib.suppress(OSError, ValueError):
                stdin.close()
            _end(proc)
            return None
        return proc

    def discard(self) -> None:
        """Kill the probe if nobody took it."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            _end(proc)

    def _runs(self, argv: Sequence[str], cwd: str) -> bool:
        return (len(argv) == 4 and list(argv[:3]) == [self.python, "-c", self._code]
                and "\n" not in argv[3] and os.path.realpath(cwd) == os.path.realpath(self.cwd))


def _end(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.communicate()
