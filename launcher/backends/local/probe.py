"""Pre-flight on this machine: the probe as a child process, in the workdir, with no shell.

:class:`ChildProbe` runs one probe command as a child of the coordinator that another thread may
end (engines whose probe runs through a local command, e.g. a scheduler's job step, use it too;
:class:`~launcher.backends.local.program.ChildProgram` is the same for a program that keeps
running while tfcluster talks to it).
:class:`LocalProbeRunner` is the local engine's :class:`~launcher.preflight.runner.ProbeRunner`:
the checkpoint dir counts as writable when its nearest existing ancestor is a writable directory
(:func:`local_dir_problem`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from launcher.backends.agent_command import explain_agent_exit
from launcher.backends.local.program import ChildProgram
from launcher.plan.planner import HostPlan
from launcher.preflight.early_probe import EarlyProbe
from launcher.preflight.report import HostReport, Layout
from launcher.preflight.runner import ProbeError, ProbeOutput

#: How long the probe started early (at the lowest priority) may take to answer before the probe
#: is started anew: it needs milliseconds on a machine that is not busy.
EARLY_ANSWER_S = 1.0


class ChildProbe:
    """One probe command as a child process; :meth:`close` kills it from any thread."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        self._lock = threading.Lock()

    def run(self, argv: Sequence[str], cwd: str | None, timeout_s: float,
            early: EarlyProbe | None = None) -> tuple[int, bytes, bytes]:
        """``(status, stdout, stderr)``; raises OSError when ``argv`` cannot be started and
        :class:`subprocess.TimeoutExpired` when it overran ``timeout_s`` (it is killed then)
        or was closed before it started. ``early``: a probe already started, which answers
        instead if it is this command in ``cwd`` and does within :data:`EARLY_ANSWER_S` (it
        runs at the lowest priority: on a busy machine ``argv`` is started after all)."""
        deadline = time.monotonic() + timeout_s
        taken = None if early is None or cwd is None else \
            self._begin(argv, lambda: early.take(argv, cwd))
        if taken is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # killed: start one after all
                return self._finish(taken, min(timeout_s, EARLY_ANSWER_S))
        started = self._begin(argv, lambda: subprocess.Popen(
            list(argv), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE))
        assert started is not None  # Popen returns one or raises
        return self._finish(started, max(0.0, deadline - time.monotonic()))

    def _begin(self, argv: Sequence[str], start: Callable[[], subprocess.Popen[bytes] | None]
               ) -> subprocess.Popen[bytes] | None:
        with self._lock:
            if self._closed:
                raise subprocess.TimeoutExpired(list(argv), 0)
            self._proc = start()
            return self._proc

    @staticmethod
    def _finish(proc: subprocess.Popen[bytes], timeout_s: float) -> tuple[int, bytes, bytes]:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        return proc.returncode, stdout, stderr

    def close(self) -> None:
        """Kill the command if it still runs; safe to call more than once."""
        with self._lock:
            self._closed = True
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()


class LocalProbeSession:
    """The probe of one host that is this machine."""

    def __init__(self, host: HostPlan, timeout_s: float, early: EarlyProbe | None = None) -> None:
        self.host = host
        self.timeout_s = timeout_s
        self.workdir = host.tasks[0].cwd if host.tasks else os.getcwd()
        self._child = ChildProbe()
        self._early = early

    def run(self, argv: Sequence[str]) -> ProbeOutput:
        python = self.host.python
        if not os.path.isdir(self.workdir):
            raise ProbeError(f"workdir missing: {self.workdir}")
        try:
            status, stdout, stderr = self._child.run(argv, self.workdir, self.timeout_s,
                                                     self._early)
        except FileNotFoundError as exc:
            raise ProbeError(f"python not found: {python}") from exc
        except OSError as exc:  # PermissionError, mostly
            raise ProbeError(f"python not runnable: {python}", f"{python}: {exc}") from exc
        except subprocess.TimeoutExpired as exc:
            raise ProbeError(f"python probe took over {self.timeout_s:.0f}s") from exc
        return ProbeOutput(status, stdout, stderr, self.workdir)

    def start(self, argv: Sequence[str]) -> ChildProgram:
        if not os.path.isdir(self.workdir):
            raise ProbeError(f"workdir missing: {self.workdir}")
        try:
            return ChildProgram(argv, self.workdir, self.workdir)
        except FileNotFoundError as exc:
            raise ProbeError(f"python not found: {self.host.python}") from exc
        except OSError as exc:
            raise ProbeError(f"python not runnable: {self.host.python}",
                             f"{self.host.python}: {exc}") from exc

    def explain(self, output: ProbeOutput) -> ProbeError:
        return explain_probe_exit(self.host, output)

    def checkpoint_dir_problem(self, path: str) -> str | None:
        return local_dir_problem(path)

    def close(self) -> None:
        self._child.close()


class LocalProbeRunner:
    """Pre-flight's probe on hosts that are this machine; ``early``: the probe started early
    (:mod:`launcher.preflight.early_probe`), which a host whose probe it is takes."""

    shared_checkpoint_dir = False
    layout: Layout = "table"

    def __init__(self, timeout_s: float, early: EarlyProbe | None = None) -> None:
        self.timeout_s = timeout_s
        self.early = early

    def describe(self, host: HostPlan) -> str:
        return "local"

    def open(self, host: HostPlan, report: HostReport) -> LocalProbeSession:
        return LocalProbeSession(host, self.timeout_s, self.early)


def explain_probe_exit(host: HostPlan, output: ProbeOutput) -> ProbeError:
    """Why a probe run through a shell (``cd WORKDIR && exec PYTHON ...``) or as a child gave no
    answer: the same reading as an agent's early exit."""
    tail = output.stderr.decode("utf-8", "replace").strip().splitlines()[-5:]
    error = explain_agent_exit(host.name, python=host.python, workdir=output.workdir,
                               status=output.status, stderr_tail=tail)
    return ProbeError(error.summary, error.detail)


def local_dir_problem(path: str) -> str | None:
    """None when the chief could create and write ``path`` (the nearest existing ancestor must be
    a writable directory)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None
