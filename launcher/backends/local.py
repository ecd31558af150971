"""Agents on this machine: ``python -m worker.agent`` as a subprocess, spoken to over its pipes.

The agent gets its own session so that a Ctrl-C in the terminal reaches only the coordinator, which
then stops every task in order (TERM, grace period, KILL) instead of racing the signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

from launcher.backends.base import Sink
from launcher.backends.channel import AgentChannel
from launcher.errors import AgentStartError
from launcher.plan.planner import HostPlan
from worker.protocol import Launch, Message


class LocalAgentHandle:
    def __init__(self, host: str, proc: subprocess.Popen[bytes], channel: AgentChannel) -> None:
        self.host = host
        self._proc = proc
        self._channel = channel
        self._closed = False
        self._known: list[psutil.Process] = []

    @property
    def pid(self) -> int:
        return self._proc.pid

    def send(self, message: Message) -> None:
        self._channel.send(message)

    def close_input(self) -> None:
        self._known = self._processes()
        self._channel.close_input()

    def close(self, timeout_s: float) -> list[int]:
        if self._closed:
            return []
        self._closed = True
        known = self._known or self._processes()
        self._channel.close_input()
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._channel.join(5.0)
        return _kill_leftovers(known)

    def _processes(self) -> list[psutil.Process]:
        """The agent's tasks and all their descendants, remembered before the agent goes."""
        import psutil

        procs: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            procs.extend(psutil.Process(self._proc.pid).children(recursive=True))
        for pid in self._channel.task_pids.values():
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(pid))
        return procs


def _kill_leftovers(procs: list[psutil.Process]) -> list[int]:
    """KILL whatever is still alive (psutil checks create time, so a reused pid is safe)."""
    import psutil

    alive = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)
    return [p.pid for p in alive]


class LocalBackend:
    def __init__(self, python: str | None = None) -> None:
        self.python = python

    def start(self, host: HostPlan, launch: Launch, sink: Sink,
              log_path: Path) -> LocalAgentHandle:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        python = self.python or host.python
        with log_path.open("ab") as log:
            try:
                proc = subprocess.Popen(
                    [python, "-m", "worker.agent"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                    start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )
            except OSError as exc:
                raise AgentStartError(host.name, f"cannot start {python!r}: {exc}",
                                      "check the spec's 'python' field") from exc
        if proc.stdin is None or proc.stdout is None:  # cannot happen with PIPE; keeps mypy honest
            raise AgentStartError(host.name, "agent started without pipes")
        channel = AgentChannel(host.name, proc.stdout, proc.stdin, sink)
        channel.start()
        channel.send(launch)
        return LocalAgentHandle(host.name, proc, channel)
