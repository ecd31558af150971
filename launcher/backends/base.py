"""An agent as the coordinator holds it, whatever the engine: a handle to send it commands, and the
events it sends back.

A transport starts one agent per host and returns an :class:`AgentHandle`. Everything the agent
says arrives at the coordinator's sink as :class:`AgentMessage` items, followed by exactly one
:class:`AgentClosed` when its output ends. Every engine shares the protocol; engines differ only
in transport (:mod:`launcher.backends.engine` is the engine's whole interface).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from launcher.errors import AgentStartError
from launcher.plan.planner import HostPlan
from worker.wire.protocol import Launch, Message


@dataclass(frozen=True)
class AgentMessage:
    host: str
    message: Message
    received_at: float


@dataclass(frozen=True)
class AgentClosed:
    """The agent's output ended: it exited, was killed, or its connection dropped."""

    host: str
    reason: str
    at: float
    #: Set when it was closed because it can never run this job (it runs another tfcluster
    #: version: :mod:`launcher.backends.version_check`); the run stops with this error.
    refused: AgentStartError | None = None


AgentEvent = AgentMessage | AgentClosed
Sink = Callable[[AgentEvent], None]


class AgentHandle(Protocol):
    host: str

    def send(self, message: Message) -> None:
        """Send a command; silently dropped once the agent is gone."""

    def launch(self, message: Launch) -> None:
        """Start the next attempt's tasks on this agent, which confirmed the last attempt's
        teardown (``Terminated``). Silently dropped once the agent is gone."""

    def close_input(self) -> None:
        """EOF on the agent's stdin: it kills whatever task is left and exits. Non-blocking."""

    def close(self, timeout_s: float) -> list[int]:
        """End the agent: EOF on its stdin (it then kills every task tree and exits), wait up to
        ``timeout_s``, kill it if needed, and make sure no process of its tasks is left.
        Returns the pids that had to be killed here. Safe to call more than once."""
        ...


class Transport(Protocol):
    """How an engine starts one host's agent: a local subprocess, an SSH session, a job step."""

    def start(self, host: HostPlan, launch: Launch, sink: Sink, log_path: Path) -> AgentHandle:
        """Start ``host``'s agent and send it ``launch``; raises AgentStartError."""
        ...
