"""Sends each host to the backend that can reach it: this machine's or SSH."""

from __future__ import annotations

from pathlib import Path

from launcher.backends.base import AgentHandle, Backend, Sink
from launcher.errors import AgentStartError
from launcher.plan.planner import HostPlan
from worker.protocol import Launch


class HostRouter:
    def __init__(self, local: Backend, remote: Backend | None = None) -> None:
        self.local = local
        self.remote = remote

    def start(self, host: HostPlan, launch: Launch, sink: Sink, log_path: Path) -> AgentHandle:
        if host.local:
            return self.local.start(host, launch, sink, log_path)
        if self.remote is None:
            raise AgentStartError(host.name, "no remote backend configured")
        return self.remote.start(host, launch, sink, log_path)
