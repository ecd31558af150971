"""The one probe pre-flight runs on every host, whatever the engine, and what it is asked.

It runs as ``PYTHON -c PROBE REQUEST`` with the tasks' interpreter in their workdir, exactly where
the agent would run, and prints one tagged JSON line: Python's version, whether ``import worker``
gives tfcluster's worker package (taking the workdir off ``sys.path`` first, as the agent and the
tasks do, so that a user's own ``worker.py`` there does not stand in for it) and which tfcluster
version that is, the installed TensorFlow distribution's version (from package
metadata: importing TensorFlow would take seconds), which of the host's task ports are taken
(bound the way gRPC binds them), its GPUs (:mod:`launcher.preflight.gpus`) and, on engines whose
hosts share the checkpoint dir, whether the chief can write a marker there and every other host
read it back. ``REQUEST`` is one JSON argument: ``{"ports": [...], "marker": {...} | null, "entrypoints":
[{"script": PATH, "tasks": [...]} | {"module": NAME, "tasks": [...]}]}``, or ``-``: then it is read
from stdin, as one line, once what does not depend on it is done (the early probe,
:mod:`launcher.preflight.early_probe`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from launcher.preflight.probe_code import MARKER_PREFIX, PROBE

if TYPE_CHECKING:
    from launcher.plan.planner import HostPlan


@dataclass(frozen=True)
class Marker:
    """The shared checkpoint dir check: the chief ``write``\\ s ``<dir>/MARKER_PREFIX<token>``,
    every other host must ``read`` it back."""

    role: Literal["write", "read"]
    directory: str
    token: str

    @property
    def path(self) -> str:
        return os.path.join(self.directory, MARKER_PREFIX + self.token)


@dataclass(frozen=True)
class HostWork:
    """One host's checks: its plan, the ports to probe, the checkpoint dir to check there if it
    is the chief's (engines whose hosts do not share it), the marker to write or read (engines
    whose hosts do)."""

    host: HostPlan
    ports: tuple[int, ...]
    checkpoint_dir: str | None
    marker: Marker | None = None

    @property
    def workdir(self) -> str:
        """The tasks' cwd: where the agent, and so the probe, runs."""
        return self.host.tasks[0].cwd if self.host.tasks else "."


#: How a Python entrypoint's task starts (:func:`launcher.plan.planner.entrypoint_argv`).
_BOOTSTRAP = ("-m", "worker.runtime.bootstrap")


def python_entrypoints(host: HostPlan) -> list[dict[str, object]]:
    """The scripts and modules ``host``'s tasks run, each once with the tasks that run it (a
    ``command`` entrypoint is not Python's: nothing to look for)."""
    found: dict[tuple[str, str], list[str]] = {}
    for task in host.tasks:
        argv = task.argv
        if tuple(argv[1:3]) != _BOOTSTRAP or len(argv) < 4:
            continue
        key = ("module", argv[4]) if argv[3] == "-m" and len(argv) > 4 else ("script", argv[3])
        found.setdefault(key, []).append(str(task.task))
    return [{kind: name, "tasks": tasks} for (kind, name), tasks in found.items()]


def probe_argv(work: HostWork) -> list[str]:
    """``PYTHON -c PROBE REQUEST``: what a :class:`~launcher.preflight.runner.ProbeSession`
    runs in the host's workdir (one argv word each, no shell)."""
    marker = None if work.marker is None else {
        "role": work.marker.role, "dir": work.marker.directory, "token": work.marker.token}
    request = {"ports": list(work.ports), "marker": marker,
               "entrypoints": python_entrypoints(work.host)}
    return [work.host.python, "-c", PROBE, json.dumps(request, separators=(",", ":"))]
