"""The command that starts a remote host's agent, and what its early exit means (pure).

The agent runs as ``cd WORKDIR && exec PYTHON -c START_CODE -m worker.agent``
(:func:`worker.wire.module_start.agent_argv`: a ``worker.py`` of the user's in the workdir cannot
stand in for tfcluster's), each piece ``shlex.quote``\\ d: nothing in it comes unquoted from the
spec.
"""

from __future__ import annotations

import dataclasses
import posixpath
import shlex

from launcher.plan.planner import HostPlan
from launcher.ssh.errors import RemoteCommandError
from worker.wire.module_start import AGENT_MODULE, agent_argv
from worker.wire.protocol import Launch
from worker.wire.version import TFCLUSTER_VERSION


def remote_path(path: str) -> str:
    """A spec path as a remote shell or SFTP sees it once quoted: ``~`` and ``~/x`` become paths
    relative to the login directory (a quoted ``~`` would not be expanded)."""
    if path == "~":
        return "."
    if path.startswith("~/"):
        return path[2:].lstrip("/") or "."
    return path


def agent_workdir(host: HostPlan) -> str:
    """Where the agent runs: its tasks' cwd (the spec's ``workdir``), so ``worker`` imports from
    a checkout there just as it does for the tasks."""
    return remote_path(host.tasks[0].cwd) if host.tasks else "."


def agent_command(workdir: str, python: str) -> str:
    """The one shell string run on the host; nothing in it comes unquoted from the spec."""
    return f"cd {shlex.quote(workdir)} && exec {shlex.join(agent_argv(python))}"


def launch_for_agent(launch: Launch, workdir: str) -> Launch:
    """The launch message with each task's cwd as seen from the agent, which already runs in
    ``workdir``: the same relative path would otherwise be resolved twice."""
    base = posixpath.normpath(workdir)

    def relative(cwd: str) -> str:
        path = posixpath.normpath(remote_path(cwd))
        if path == base:
            return "."
        if posixpath.isabs(path) or posixpath.isabs(base):
            return path
        return posixpath.relpath(path, base)

    return dataclasses.replace(launch, tasks=[dataclasses.replace(t, cwd=relative(t.cwd))
                                              for t in launch.tasks])


def explain_agent_exit(host: str, *, python: str, workdir: str, status: int,
                       stderr_tail: list[str]) -> RemoteCommandError:
    """Why the agent ended before saying hello, from its exit status and last stderr lines."""
    text = "\n".join(stderr_tail)
    last = stderr_tail[-1] if stderr_tail else "(no output)"
    if status in (126, 127) and "cd:" not in text:
        return RemoteCommandError(host, f"python not found: {python}",
                                  f"cannot run {python!r} there (exit {status}): {last}",
                                  "install Python 3.10+ on the host or set 'python' in the spec "
                                  "to its path")
    if "cd:" in text or "can't cd" in text:
        return RemoteCommandError(host, f"workdir missing: {workdir}",
                                  f"cannot enter the workdir {workdir!r}: {last}",
                                  "create it on the host or fix 'workdir' in the spec")
    if "No module named 'worker.wire'" in text:  # tfcluster there predates the version handshake
        return RemoteCommandError(host, f"tfcluster there is older than {TFCLUSTER_VERSION}",
                                  f"{python} in {workdir} has a tfcluster older than the "
                                  f"coordinator's {TFCLUSTER_VERSION}: {last}",
                                  f"install tfcluster {TFCLUSTER_VERSION} there, or point the "
                                  "spec's 'python' at an interpreter that has it")
    if "No module named 'worker'" in text or f"No module named {AGENT_MODULE}" in text:
        return RemoteCommandError(host, "worker not importable",
                                  f"{python} cannot import the 'worker' package in {workdir}: "
                                  f"{last}",
                                  "install tfcluster on the host or set 'workdir' to a checkout")
    return RemoteCommandError(host, f"agent exited with status {status}",
                              f"the agent exited with status {status} before starting: {last}")
