"""The agents of a job, one per host, alive from the first attempt to the end of the job.

An attempt is a launch message to each host's agent; its teardown a ``terminate`` that the agent
confirms (``Terminated``) once every task tree is gone. The next attempt reuses the agent (and its
SSH connection); only an agent that was lost (its output ended, or it never confirmed) is replaced
by a new one. Starting an agent runs in its own thread (an SSH connection can take seconds) so
that the attempt's loop keeps running meanwhile; each start's outcome arrives on the inbox as
:class:`AgentUp` or :class:`AgentDown` (an agent that is reused arrives as :class:`AgentUp` at
once). Only the job loop's thread calls the methods here.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.backends.base import AgentClosed, AgentEvent, AgentHandle, AgentMessage
from launcher.backends.engine import Backend
from launcher.backends.version_check import VersionMismatch
from launcher.errors import AgentStartError
from launcher.plan.planner import HostPlan, LaunchPlan
from worker.wire.protocol import Message, Output, Pause, Ping, Terminate


@dataclass(frozen=True)
class AgentUp:
    """A host's agent is up and was sent this attempt's launch message."""

    host: str
    handle: AgentHandle
    reused: bool = False


@dataclass(frozen=True)
class AgentDown:
    """A host's agent could not be started (unreachable, refused host key, no python, ...)."""

    host: str
    error: str
    at: float
    #: Set when the host can never run this job (another tfcluster version there): the run stops.
    refused: AgentStartError | None = None


#: Extra time, beyond the grace period, that agents get to confirm their tasks are gone.
TEARDOWN_MARGIN_S = 10.0
#: Longest wait, at teardown, for agent starts still under way (SSH connects are bounded).
START_WAIT_S = 120.0
#: How long an agent gets to exit after its input closed, before it is killed.
AGENT_EXIT_WAIT_S = 2.0

#: Runs an agent start (``name``, ``work``) concurrently with the attempt's loop.
Spawn = Callable[[str, Callable[[], None]], None]


def in_thread(name: str, work: Callable[[], None]) -> None:
    threading.Thread(target=work, name=name, daemon=True).start()


class AgentSet:
    """``put`` receives every agent event; while an attempt has called :meth:`route_output`, task
    output goes to its callback instead, at once, from the agent's reader thread, so that output
    never queues in front of an exit, a heartbeat or an agent's end, however much of it there is.
    """

    def __init__(self, backend: Backend, put: Callable[[AgentEvent | AgentUp | AgentDown], None],
                 clock: Callable[[], float], spawn: Spawn = in_thread) -> None:
        self._backend = backend
        self._put = put
        self._clock = clock
        self._spawn = spawn
        self._on_output: Callable[[str, Output], None] | None = None
        self.handles: dict[str, AgentHandle] = {}  # every agent started and not yet reaped
        self._open: set[str] = set()  # up, output not yet ended
        self._starting: set[str] = set()  # start under way
        self._confirmed: set[str] = set()  # confirmed this attempt's teardown
        self._silent: set[str] = set()  # lost by silence: ended without waiting
        self.started = 0  # agents started over the job (a reused one counts once)
        self.pausing = False  # tfcluster is being stopped (Ctrl-Z): no ping

    @property
    def starting(self) -> bool:
        return bool(self._starting)

    @property
    def any_open(self) -> bool:
        return bool(self._open)

    @property
    def unconfirmed(self) -> set[str]:
        """Open agents that have not confirmed this attempt's teardown yet."""
        return self._open - self._confirmed

    # --- an attempt --------------------------------------------------------------------------

    def route_output(self, callback: Callable[[str, Output], None]) -> None:
        """Hand task output to ``callback(host, output)`` (thread-safe, non-blocking) instead of
        ``put``, for the attempt about to start."""
        self._on_output = callback

    def start_all(self, plan: LaunchPlan, log_for: Callable[[str], Path]) -> None:
        """Send every host its launch: through its agent if it is up, else by starting one."""
        self._confirmed.clear()

        def start(host: HostPlan) -> None:
            try:
                handle = self._backend.start_agent(host, plan.launch_message(host), self._sink,
                                                   log_for(host.name))
            except Exception as exc:  # any failure to start is that host's failure
                why = str(exc) if isinstance(exc, AgentStartError) \
                    else f"{host.name}: {type(exc).__name__}: {exc}"
                refused = exc if isinstance(exc, VersionMismatch) else None
                self._put(AgentDown(host.name, why, self._clock(), refused))
                return
            self._put(AgentUp(host.name, handle))

        fresh = []
        for host in plan.hosts:
            if host.name in self._open:
                handle = self.handles[host.name]
                handle.launch(plan.launch_message(host))
                self._put(AgentUp(host.name, handle, reused=True))
            else:
                self._starting.add(host.name)
                fresh.append(host)
        for host in fresh:
            self._spawn(f"start-{host.name}", functools.partial(start, host))

    def _sink(self, event: AgentEvent) -> None:
        if isinstance(event, AgentClosed) and event.refused is not None:  # its hello said so
            self._put(AgentDown(event.host, event.reason, event.at, event.refused))
        elif (self._on_output is not None and isinstance(event, AgentMessage)
                and isinstance(event.message, Output)):
            self._on_output(event.host, event.message)
        else:
            self._put(event)

    def up(self, item: AgentUp) -> None:
        self._starting.discard(item.host)
        if not item.reused:
            self.started += 1
            self.handles[item.host] = item.handle
            self._open.add(item.host)

    def down(self, item: AgentDown) -> None:
        """A start failed. Raises the error of a host that can never run this job (it runs
        another tfcluster version): the run stops there, with that one line."""
        self._starting.discard(item.host)
        if item.refused is not None:
            raise item.refused

    def closed(self, host: str) -> None:
        """The agent's output ended (it exited, was killed, or its connection dropped)."""
        self._open.discard(host)

    def lost(self, host: str) -> None:
        """The host is lost (its agent fell silent): nothing is sent to it or awaited from it any
        more, and its agent is ended without waiting (:meth:`drop_lost`)."""
        self._open.discard(host)
        self._silent.add(host)

    def confirmed(self, host: str) -> None:
        """The agent said every task tree of this attempt is gone."""
        self._confirmed.add(host)

    def ping(self) -> None:
        """Tell every agent we are alive, so a partitioned agent can stop its tasks itself (not
        while tfcluster is being stopped: a ping then would undo the pause)."""
        if not self.pausing:
            for host in list(self._open):
                self.handles[host].send(Ping())

    def pause(self) -> None:
        """Tell every agent that tfcluster is about to stop (Ctrl-Z): until they hear from it
        again, its silence is no loss. From any thread; :meth:`resumed` once it runs again."""
        self.pausing = True
        for host in list(self._open):
            self.handles[host].send(Pause())

    def resumed(self) -> None:
        self.pausing = False

    def send(self, host: str, message: Message) -> bool:
        """Send to one host's agent; False when it is not up (or never will be)."""
        if host not in self._open:
            return False
        self.handles[host].send(message)
        return True

    def send_all(self, message: Message) -> set[str]:
        """Send to every agent that is up; the hosts it went to."""
        for host in self._open:
            self.handles[host].send(message)
        return set(self._open)

    def terminate_all(self, grace_s: float) -> None:
        self.send_all(Terminate(grace_period_s=grace_s))

    # --- ending agents -----------------------------------------------------------------------

    def drop(self, hosts: set[str], timeout_s: float) -> dict[str, list[int]]:
        """End the agents of ``hosts`` (lost, or they never confirmed a teardown): the next
        attempt starts new ones there. The pids each left that had to be killed, by host."""
        leftovers: dict[str, list[int]] = {}
        for host in sorted(hosts):
            handle = self.handles.pop(host, None)
            self._open.discard(host)
            if handle is not None and (pids := handle.close(timeout_s=timeout_s)):
                leftovers[host] = pids
        return leftovers

    def drop_lost(self, timeout_s: float) -> dict[str, list[int]]:
        """Reap the agents whose output ended (see :meth:`drop`); a silent one at once."""
        silent, self._silent = self._silent & set(self.handles), set()
        return {**self.drop(silent, 0.0), **self.drop(set(self.handles) - self._open, timeout_s)}

    def close_all(self, timeout_s: float) -> dict[str, list[int]]:
        """End every agent (at the end of the job): EOF to all at once, then each is waited
        for. Safe to call more than once."""
        for handle in self.handles.values():
            handle.close_input()
        return self.drop(set(self.handles), timeout_s)
