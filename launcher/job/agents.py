"""The agents of one attempt, one per host: started all at once, pinged, told to stop, closed.

Each start runs in its own thread (an SSH connection can take seconds) so that the attempt's loop
keeps running meanwhile: hosts already up are pinged and watched, and each start's outcome arrives
on the attempt's inbox as :class:`AgentUp` or :class:`AgentDown`. The attempt's loop is the only
caller of every other method.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.backends.base import AgentEvent, AgentHandle, AgentMessage, Backend
from launcher.errors import AgentStartError
from launcher.plan.planner import HostPlan, LaunchPlan
from worker.protocol import Message, Output, Ping, Terminate


@dataclass(frozen=True)
class AgentUp:
    """A host's agent started and was sent its launch message."""

    host: str
    handle: AgentHandle


@dataclass(frozen=True)
class AgentDown:
    """A host's agent could not be started (unreachable, refused host key, no python, ...)."""

    host: str
    error: str
    at: float


#: Runs an agent start (``name``, ``work``) concurrently with the attempt's loop.
Spawn = Callable[[str, Callable[[], None]], None]


def in_thread(name: str, work: Callable[[], None]) -> None:
    threading.Thread(target=work, name=name, daemon=True).start()


class AgentSet:
    """``put`` receives every agent event; once :meth:`route_output` is called, task output goes
    to its callback instead, at once, from the agent's reader thread, so that output never queues
    in front of an exit, a heartbeat or an agent's end, however much of it there is."""

    def __init__(self, backend: Backend, put: Callable[[AgentEvent | AgentUp | AgentDown], None],
                 clock: Callable[[], float], spawn: Spawn = in_thread) -> None:
        self._backend = backend
        self._put = put
        self._on_output: Callable[[str, Output], None] | None = None
        self._clock = clock
        self._spawn = spawn
        self.handles: dict[str, AgentHandle] = {}
        self._open: set[str] = set()  # started, output not yet ended
        self._starting: set[str] = set()  # start under way
        self._closed: set[str] = set()

    @property
    def starting(self) -> bool:
        return bool(self._starting)

    @property
    def any_open(self) -> bool:
        return bool(self._open)

    def start_all(self, plan: LaunchPlan, log_for: Callable[[str], Path]) -> None:
        """Start every host's agent at once, each from its own thread."""

        def start(host: HostPlan) -> None:
            try:
                handle = self._backend.start(host, plan.launch_message(host), self._sink,
                                             log_for(host.name))
            except Exception as exc:  # any failure to start is that host's failure
                why = str(exc) if isinstance(exc, AgentStartError) \
                    else f"{host.name}: {type(exc).__name__}: {exc}"
                self._put(AgentDown(host.name, why, self._clock()))
                return
            self._put(AgentUp(host.name, handle))

        for host in plan.hosts:
            self._starting.add(host.name)
        for host in plan.hosts:
            self._spawn(f"start-{host.name}", functools.partial(start, host))

    def route_output(self, callback: Callable[[str, Output], None]) -> None:
        """Hand task output to ``callback(host, output)`` (thread-safe, non-blocking) instead of
        ``put``. Call before :meth:`start_all`."""
        self._on_output = callback

    def _sink(self, event: AgentEvent) -> None:
        if (self._on_output is not None and isinstance(event, AgentMessage)
                and isinstance(event.message, Output)):
            self._on_output(event.host, event.message)
        else:
            self._put(event)

    def up(self, item: AgentUp) -> None:
        self._starting.discard(item.host)
        self.handles[item.host] = item.handle
        if item.host not in self._closed:
            self._open.add(item.host)

    def down(self, item: AgentDown) -> None:
        self._starting.discard(item.host)

    def closed(self, host: str) -> None:
        """The agent's output ended (it exited, was killed, or its connection dropped)."""
        self._open.discard(host)
        self._closed.add(host)

    def ping(self) -> None:
        """Tell every agent we are alive, so a partitioned agent can stop its tasks itself."""
        for host in self._open:
            self.handles[host].send(Ping())

    def send(self, host: str, message: Message) -> bool:
        """Send to one host's agent; False when it has not started (or never will)."""
        handle = self.handles.get(host)
        if handle is None:
            return False
        handle.send(message)
        return True

    def send_all(self, message: Message) -> None:
        for handle in self.handles.values():
            handle.send(message)

    def terminate_all(self, grace_s: float) -> None:
        self.send_all(Terminate(grace_period_s=grace_s))

    def close_inputs(self) -> None:
        """EOF to every agent: each kills what is left of its tasks and exits."""
        for handle in self.handles.values():
            handle.close_input()

    def close_all(self, timeout_s: float) -> dict[str, list[int]]:
        """End every agent (safe to call more than once); the pids each left behind that had to
        be killed here, by host."""
        leftovers = {host: handle.close(timeout_s=timeout_s)
                     for host, handle in self.handles.items()}
        return {host: pids for host, pids in leftovers.items() if pids}
