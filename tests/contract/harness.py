"""What the engine contract (tests/contract/test_engines.py) runs on: one engine, a spec of tiny
real tasks for it, a sink that records what its agents say, and the engine's own view of which
processes of the job are left.

A :class:`Rig` plans an attempt the way the coordinator does (the engine's placement, ports from
a :class:`~launcher.plan.ports.PortAllocator`), starts one agent per host of the plan and keeps
every handle, so that :meth:`Rig.cleanup` ends them all even when a test failed. Every task of
a real engine carries :data:`MARK_VAR` in its environment (the spec's ``env``), which is how its
processes are found on this machine, whichever engine started them. The fake engine's processes
are its simulated world's (:mod:`tests.support.fake_backend`), whose time only moves while a test waits.
"""

from __future__ import annotations

import contextlib
import enum
import sys
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from launcher.backends.base import AgentClosed, AgentEvent, AgentHandle, AgentMessage
from launcher.backends.engine import Backend, EngineOptions
from launcher.plan.planner import HostPlan, LaunchPlan, Planner
from launcher.plan.ports import PortAllocator
from launcher.spec.loading import spec_from_dict
from launcher.spec.model import ClusterSpec
from tests.support import procs
from tests.support.waiting import wait_until
from worker.wire.protocol import Message

#: In the environment of every task of a rig's job (not ``TFCLUSTER_*``: tfcluster strips those).
MARK_VAR = "TFC_CONTRACT_MARK"
#: What every task prints first, on stdout.
LINE = "contract: the task speaks"
#: How long a task of :attr:`Program.SLEEP` sleeps: longer than any test.
SLEEP_S = 600
#: How long closing one agent may take.
CLOSE_S = 10.0
#: How long the tasks' agents may take to be seen in the process table once the tasks started.
AGENTS_S = 10.0

_TASK_CODE = (f"import sys, time; print({LINE!r}, flush=True); "
              f"time.sleep({SLEEP_S} if sys.argv[1] == 'sleep' else 0)")


class Program(enum.Enum):
    """What each task of a rig's job does."""

    #: Print :data:`LINE` and exit 0.
    PRINT = "print"
    #: Print :data:`LINE`, then sleep until it is stopped.
    SLEEP = "sleep"


def task_command(program: Program) -> list[str]:
    return [sys.executable, "-c", _TASK_CODE, program.value]


@dataclass(frozen=True)
class Past:
    """An attempt that ran, as :meth:`Backend.place` sees it."""

    attempt: int
    lost_hosts: frozenset[str]


class Recorder:
    """The sink of every agent of a rig: what they said, in arrival order, from any thread."""

    def __init__(self) -> None:
        self._events: list[AgentEvent] = []
        self._changed = threading.Condition()

    def __call__(self, event: AgentEvent) -> None:
        with self._changed:
            self._events.append(event)
            self._changed.notify_all()

    @property
    def events(self) -> list[AgentEvent]:
        with self._changed:
            return list(self._events)

    def wait(self, done: Callable[[list[AgentEvent]], bool], timeout_s: float) -> bool:
        """Whether ``done(events)`` came true within ``timeout_s``."""
        with self._changed:
            return self._changed.wait_for(lambda: done(self._events), timeout_s)


def messages(events: Sequence[AgentEvent], kind: type[Message],
             host: str | None = None) -> list[Any]:
    """The messages of type ``kind`` (from ``host``'s agent if given), in arrival order."""
    return [e.message for e in events if isinstance(e, AgentMessage)
            and isinstance(e.message, kind) and (host is None or e.host == host)]


def closings(events: Sequence[AgentEvent], host: str) -> list[AgentClosed]:
    return [e for e in events if isinstance(e, AgentClosed) and e.host == host]


@dataclass
class Job:
    """One attempt of a rig's job, its agents started."""

    spec: ClusterSpec
    backend: Backend
    plan: LaunchPlan
    handles: dict[str, AgentHandle]

    @property
    def hosts(self) -> list[str]:
        return [h.name for h in self.plan.hosts]

    @property
    def tasks(self) -> list[str]:
        return [str(t.task) for t in self.plan.tasks]


class Rig(ABC):
    """One engine under the contract (see the module docstring)."""

    name: str

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.base_dir = tmp_path
        self.run_dir = tmp_path / "run"
        self.mark = uuid.uuid4().hex
        self.recorder = Recorder()
        self.options = EngineOptions(python=sys.executable, base_dir=str(tmp_path))
        self._handles: list[AgentHandle] = []
        self._backends: list[Backend] = []
        self._allocators: list[PortAllocator] = []

    # --- what each engine says -----------------------------------------------------------------

    @abstractmethod
    def spec_fields(self) -> dict[str, Any]:
        """The spec's fields that make it this engine's job (tasks, hosts, engine sections)."""

    @abstractmethod
    def make_backend(self, spec: ClusterSpec) -> Backend:
        """The engine for one run of ``spec``."""

    def wait(self, done: Callable[[list[AgentEvent]], bool], timeout_s: float) -> bool:
        """Whether ``done(events)`` came true within ``timeout_s``."""
        return self.recorder.wait(done, timeout_s)

    def left(self) -> list[str]:
        """The job's processes still alive."""
        return [_describe(p) for p in procs.with_env(MARK_VAR, self.mark)]

    def wait_none_left(self, timeout_s: float) -> list[str]:
        """Wait up to ``timeout_s`` for no process of the job to be left; returns those left."""
        left = procs.wait_until_empty(lambda: procs.with_env(MARK_VAR, self.mark), timeout_s)
        return [_describe(p) for p in left]

    def agents(self, job: Job) -> list[psutil.Process]:
        """The agent of every host of ``job`` (``python -m worker.agent``: its tasks' parent),
        waited for: a task reported started may still be between its two execs (``setpriv``,
        then its program), when its environment cannot be read (CI failure under load: one
        host's agent was not found)."""
        agents: list[psutil.Process] = []

        def every_host() -> bool:
            agents[:] = _agents_of(procs.with_env(MARK_VAR, self.mark))
            return len(agents) == len(job.hosts)
        try:
            wait_until(every_host, AGENTS_S, "an agent for every host")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; agents found: {[_describe(a) for a in agents]}") from None
        return agents

    def lose_agents(self, job: Job) -> None:
        """Kill every host's agent as a crash would (SIGKILL), its tasks left running."""
        for agent in self.agents(job):
            agent.kill()

    # --- the job -------------------------------------------------------------------------------

    def spec(self, program: Program) -> ClusterSpec:
        fields = self.spec_fields()
        return spec_from_dict({
            "name": "contract",
            "entrypoint": {"command": task_command(program)},
            "env": {MARK_VAR: self.mark, **fields.pop("env", {})},
            "health": {"grace_period_s": 2.0},
            **fields,
        })

    def backend(self, spec: ClusterSpec) -> Backend:
        backend = self.make_backend(spec)
        self._backends.append(backend)
        return backend

    def planner(self, spec: ClusterSpec, backend: Backend) -> Planner:
        return Planner(spec, backend.place, run_dir=str(self.run_dir), base_dir=str(self.base_dir))

    def plan(self, spec: ClusterSpec, backend: Backend, attempt: int = 0) -> LaunchPlan:
        """Attempt ``attempt`` planned as the coordinator plans it, its ports allocated."""
        planner = self.planner(spec, backend)
        allocator = PortAllocator()
        self._allocators.append(allocator)
        wanted = planner.ports_to_allocate
        ports = dict(zip(wanted, allocator.allocate(len(wanted)), strict=True))
        return planner.plan(attempt, ports)

    def start(self, backend: Backend, host: HostPlan, plan: LaunchPlan) -> AgentHandle:
        handle = backend.start_agent(host, plan.launch_message(host), self.recorder,
                                     self.run_dir / "agents" / f"{host.name}.log")
        self._handles.append(handle)
        return handle

    def launch(self, program: Program) -> Job:
        """Plan attempt 0 of a job of ``program`` and start every host's agent."""
        spec = self.spec(program)
        backend = self.backend(spec)
        plan = self.plan(spec, backend)
        handles = {host.name: self.start(backend, host, plan) for host in plan.hosts}
        return Job(spec, backend, plan, handles)

    def cleanup(self) -> list[str]:
        """End everything the rig started, whatever state it is in; returns the job's processes
        that were still left after every agent was closed (and have now been killed)."""
        for handle in self._handles:
            with contextlib.suppress(Exception):
                handle.close(CLOSE_S)
        for backend in self._backends:
            with contextlib.suppress(Exception):
                backend.close()
        for allocator in self._allocators:
            allocator.close()
        left = procs.with_env(MARK_VAR, self.mark)
        procs.kill_all(left)
        return [_describe(p) for p in left]


def _agents_of(tasks: Sequence[psutil.Process]) -> list[psutil.Process]:
    """The agents (``python -m worker.agent``) among the parents of ``tasks``."""
    found: dict[int, psutil.Process] = {}
    for task in tasks:
        with contextlib.suppress(psutil.Error):
            parent = task.parent()
            if parent is not None and "worker.agent" in parent.cmdline():
                found[parent.pid] = parent
    return list(found.values())


def _describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} {' '.join(proc.cmdline())[:120]}"
    except psutil.Error:
        return str(proc.pid)

