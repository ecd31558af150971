"""A simulated world for unit-testing the job loop in memory: a clock that only moves when the loop
waits, an inbox that delivers scheduled agent events at their simulated time, and a backend whose
agents follow a per-task script (report steps, exit, hang, ignore TERM) and obey the protocol's
commands (Terminate, SignalTasks, DumpStacks, EOF) the way the real agent does.

Nothing here starts a process or a thread: agent starts run inline (``spawn=run_inline``) and a
test of a 60 s hang runs in milliseconds. The real-process tests (tests/integration, tests/ssh)
prove the same behaviour against the real agent.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.backends.base import AgentClosed, AgentEvent, AgentMessage, Sink
from launcher.backends.session import PlainSession
from launcher.chief.access import LOCAL_ONLY
from launcher.errors import AgentStartError
from launcher.job.inbox import InboxItem
from launcher.plan.placement import (
    PastAttempt,
    PlacedHost,
    Placement,
    listed_pool,
    named_placement,
)
from launcher.plan.planner import HostPlan, LaunchPlan
from launcher.preflight.report import HostReport, PreflightReport
from launcher.spec.model import ClusterSpec
from worker.wire.protocol import (
    DumpStacks,
    Exited,
    Heartbeat,
    Launch,
    Message,
    Output,
    Progress,
    SignalTasks,
    StacksDumped,
    Started,
    Terminate,
    Terminated,
)


class SimClock:
    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


#: Something scheduled on the inbox: an item, or a callable that makes one when it comes due
#: (None: nothing any more, e.g. the task that would have reported it was killed meanwhile).
Scheduled = InboxItem | Callable[[], InboxItem | None]


class SimInbox:
    """A ``queue.SimpleQueue`` look-alike in simulated time: ``get(timeout)`` returns the next item
    due by ``now + timeout`` (moving the clock to it), else moves the clock by ``timeout`` and
    raises ``queue.Empty``. One inbox serves every attempt of a job (``new_inbox=lambda: it``)."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self._due: list[tuple[float, int, Scheduled]] = []
        self._order = itertools.count()

    def put(self, item: InboxItem) -> None:
        self.at(self.clock.now, item)

    def at(self, when: float, item: Scheduled) -> None:
        heapq.heappush(self._due, (when, next(self._order), item))

    def get(self, block: bool = True, timeout: float | None = None) -> InboxItem:
        limit = self.clock.now + (timeout if timeout is not None else 3600.0)
        while self._due and self._due[0][0] <= limit:
            when, _, scheduled = heapq.heappop(self._due)
            self.clock.now = max(self.clock.now, when)
            item = scheduled() if callable(scheduled) else scheduled
            if item is not None:
                return item
        self.clock.now = limit
        raise queue.Empty

    def get_nowait(self) -> InboxItem:
        return self.get(timeout=0.0)


def run_inline(_name: str, work: Callable[[], None]) -> None:
    work()


@dataclass
class TaskScript:
    """What one task does in one attempt, in simulated seconds from its start."""

    steps: int = 10
    step_s: float = 0.1
    #: Exit with this code after the last step (None: keep running: a hang once steps run out).
    exit_code: int | None = 0
    #: Ignore SIGTERM (only KILL, after the grace period, ends it).
    ignores_term: bool = False
    #: Lines it prints on stdout as it starts (each an ``Output`` message).
    stdout: tuple[str, ...] = ()
    #: The metrics each of its step reports carries.
    metrics: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Sent:
    host: str
    message: Message | str  # "EOF" for close_input
    at: float


@dataclass
class FakeWorld:
    """Holds the scripts (by attempt and task) and records what the coordinator sent."""

    clock: SimClock
    inbox_for: Callable[[], SimInbox]
    scripts: Callable[[int, str], TaskScript] = lambda attempt, task: TaskScript()
    failing_hosts: dict[str, str] = field(default_factory=dict)
    sent: list[Sent] = field(default_factory=list)
    agents_started: int = 0
    agents_closed: int = 0
    #: The latest agent of each host (a test loses one with ``agents[host].lose()``).
    agents: dict[str, FakeAgent] = field(default_factory=dict)


class FakeAgent:
    """One host's agent in the simulation; speaks to the sink exactly as a real channel does."""

    def __init__(self, world: FakeWorld, host: str, launch: Launch, sink: Sink) -> None:
        self.world, self.host, self.sink = world, host, sink
        self.inbox = world.inbox_for()
        self.alive: set[str] = set()
        self.closed = False
        self.terminating = False
        self.launches = 0
        self.launch(launch)
        self.inbox.at(world.clock.now + launch.heartbeat_interval_s, self._heartbeat)

    def launch(self, launch: Launch) -> None:
        """Start an attempt's tasks (the first launch, or a reused agent's next one)."""
        self.world.sent.append(Sent(self.host, launch, self.world.clock.now))
        self.launches += 1
        self.current = launch
        now = self.world.clock.now
        for number, task in enumerate(launch.tasks):
            script = self.world.scripts(launch.attempt, task.task)
            self.alive.add(task.task)
            self._later(now, Started(task=task.task, pid=1000 + number, ts=now))
            for line in script.stdout:
                self._later(now, Output(task=task.task, stream="stdout", line=line))
            for step in range(1, script.steps + 1):
                self._later(now + step * script.step_s,
                            Progress(task=task.task, step=step, ts=now + step * script.step_s,
                                     metrics=dict(script.metrics)))
            if script.exit_code is not None:
                end = now + (script.steps + 1) * script.step_s
                self._later(end, Exited(task=task.task, ts=end, exit_code=script.exit_code,
                                        signal=None))

    def _heartbeat(self) -> AgentEvent | None:
        """Every heartbeat interval while the agent lives, as the real agent does."""
        if self.closed:
            return None
        now = self.world.clock.now
        self.inbox.at(now + self.current.heartbeat_interval_s, self._heartbeat)
        return AgentMessage(self.host, Heartbeat(ts=now, tasks={}), now)

    def _later(self, when: float, message: Message) -> None:
        launch = self.launches
        self.inbox.at(when, lambda: self._deliver(message, when, launch))

    def _deliver(self, message: Message, when: float, launch: int) -> AgentEvent | None:
        """Called as a scheduled message comes due: dropped if its task (or its attempt) is gone
        meanwhile."""
        task = getattr(message, "task", None)
        if self.closed or (task is not None and (task not in self.alive
                                                  or launch != self.launches)):
            return None
        if isinstance(message, Exited):
            self.alive.discard(message.task)
            if self.terminating and not self.alive:  # the last one was KILLed: confirm
                self.terminating = False
                self.sink(AgentMessage(self.host, message, when))
                return AgentMessage(self.host, Terminated(ts=when), when)
        return AgentMessage(self.host, message, when)

    def _exit_now(self, task: str, sig: signal.Signals) -> None:
        now = self.world.clock.now
        self.alive.discard(task)
        self.sink(AgentMessage(self.host, Exited(task=task, ts=now, exit_code=None,
                                                 signal=sig.name), now))

    # --- the AgentHandle interface ---------------------------------------------------------

    def send(self, message: Message) -> None:
        self.world.sent.append(Sent(self.host, message, self.world.clock.now))
        if isinstance(message, Terminate):
            self.terminating = True
            for task in sorted(self.alive):
                script = self.world.scripts(self.current.attempt, task)
                if not script.ignores_term:
                    self._exit_now(task, signal.SIGTERM)
                else:
                    kill_at = self.world.clock.now + message.grace_period_s
                    self._later(kill_at, Exited(task=task, ts=kill_at, exit_code=None,
                                                signal="SIGKILL"))
            if not self.alive:
                self.terminating = False
                now = self.world.clock.now
                self.sink(AgentMessage(self.host, Terminated(ts=now), now))
        elif isinstance(message, SignalTasks) and message.task in self.alive:
            self._exit_now(message.task, signal.Signals[message.signal])
        elif isinstance(message, DumpStacks):  # recorded above: sent before the Terminate
            now = self.world.clock.now
            self.sink(AgentMessage(self.host, StacksDumped(), now))

    def close_input(self) -> None:
        if self.closed:
            return
        self.world.sent.append(Sent(self.host, "EOF", self.world.clock.now))
        for task in sorted(self.alive):
            self._exit_now(task, signal.SIGKILL)
        self.closed = True
        self.world.agents_closed += 1
        self.sink(AgentClosed(self.host, "agent closed its output", self.world.clock.now))

    def close(self, timeout_s: float) -> list[int]:
        self.close_input()
        return []

    def lose(self, reason: str = "agent lost") -> None:
        """End as a killed agent or a dropped connection does: its tasks die unreported and its
        output ends (the one ``AgentClosed``)."""
        if self.closed:
            return
        self.alive.clear()
        self.closed = True
        self.world.agents_closed += 1
        self.sink(AgentClosed(self.host, reason, self.world.clock.now))


class FakeBackend:
    """The fake engine: tasks where the spec names them (as the local engine places them), agents
    that follow the world's scripts, this machine's files for the chief's checkpoints, a session
    that adds nothing. It passes the engine contract suite (tests/contract) like the real ones."""

    name = "fake"
    chief_files = LOCAL_ONLY
    probes_before_run = False

    def __init__(self, world: FakeWorld, python: str = sys.executable) -> None:
        self.world = world
        self.python = python
        self.closed = False

    def place(self, spec: ClusterSpec, history: Sequence[PastAttempt]) -> Placement:
        return named_placement(spec, local_python=self.python)

    def start_agent(self, host: HostPlan, launch: Launch, sink: Sink,
                    log_path: Path) -> FakeAgent:
        if host.name in self.world.failing_hosts:
            raise AgentStartError(host.name, self.world.failing_hosts[host.name],
                                  "check the host")
        self.world.agents_started += 1
        agent = self.world.agents[host.name] = FakeAgent(self.world, host.name, launch, sink)
        return agent

    def pool(self, spec: ClusterSpec) -> tuple[PlacedHost, ...]:
        return listed_pool(spec, local_python=self.python)

    def probe(self, launch_plan: LaunchPlan) -> PreflightReport:
        """Every host answers but the world's failing hosts."""
        reports = []
        for host in launch_plan.hosts:
            report = HostReport(host.name, "fake")
            if host.name in self.world.failing_hosts:
                report.fail(self.world.failing_hosts[host.name])
            reports.append(report)
        return PreflightReport(hosts=tuple(reports), duration_s=0.0)

    def plan_lines(self, launch_plan: LaunchPlan) -> list[str]:
        return []

    def session(self) -> PlainSession:
        return PlainSession()

    def close(self) -> None:
        self.closed = True
