"""What arrives at a running attempt, on one inbox: every agent's events, the outcome of each
agent start, and tfcluster's own signals. One reader (the attempt's loop) decides in arrival order.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from launcher.backends.base import AgentEvent
from launcher.job.agents import AgentDown, AgentUp
from launcher.job.server_watch import ServerAnswered, ServerSilent

#: The wall clock the job loop reads (``time.time``; tests pass a simulated one).
Clock = Callable[[], float]


@dataclass(frozen=True)
class Interrupt:
    """tfcluster itself got SIGINT / SIGTERM / SIGHUP."""

    signum: int

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


@dataclass(frozen=True)
class Resize:
    """Stop the attempt gracefully to restart the job at another size (hosts came back)."""

    reason: str
    hosts: tuple[str, ...]


InboxItem = AgentEvent | Interrupt | AgentUp | AgentDown | Resize | ServerAnswered | ServerSilent


class Inbox(Protocol):
    """Where everything for the attempt arrives (``queue.SimpleQueue`` is one)."""

    def put(self, item: InboxItem) -> None: ...

    def get(self, block: bool = True, timeout: float | None = None) -> InboxItem: ...

    def get_nowait(self) -> InboxItem: ...
