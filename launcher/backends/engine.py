"""The one seam between tfcluster and an engine (this machine, SSH, a scheduler's allocation;
next Kubernetes or Ray): what the coordinator, the command line and pre-flight ask of it.

An engine is a module of :mod:`launcher.backends` named after it (``launcher.backends.<name>``),
with the two functions of :class:`EngineModule`; :func:`launcher.backends.create_backend` finds it
by ``ClusterSpec.engine`` and imports it on first use. Everything an engine decides is here:

- **where tasks run**, every attempt anew (:meth:`Backend.place`, given the attempts so far: the
  place to leave out a lost host, move to a spare or shrink);
- **how an agent starts** there (:meth:`Backend.start_agent`; the agent protocol is the same
  everywhere);
- **pre-flight**: the one probe, run exactly where each agent would run (:meth:`Backend.probe`);
- **the chief's files**: listing its checkpoints and locking its checkpoint directory
  (:attr:`Backend.chief_files`);
- **a run's session** (:meth:`Backend.session`): extra stop signals, the engine's per-attempt
  events, its part of ``summary.json`` and its own exit code.

Optional capabilities sit beside it, e.g. :class:`Submitter` (``tfcluster submit``) and
:class:`ProbesHosts` (``tfcluster doctor``).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from launcher.backends.base import AgentHandle, Sink
from launcher.chief.access import ChiefFiles
from launcher.plan.placement import PastAttempt, PlacedHost, Placement
from launcher.plan.planner import HostPlan, LaunchPlan
from launcher.spec.model import ClusterSpec
from worker.wire.protocol import Launch

if TYPE_CHECKING:
    from launcher.backends.early_agent import EarlyAgent
    from launcher.preflight.report import PreflightReport
    from launcher.preflight.runner import ProbeRunner
    from launcher.run.events import Event


@dataclass(frozen=True)
class EngineOptions:
    """What the command line fixes for every engine of a run."""

    #: The interpreter of this machine's tasks and agents (tfcluster's own).
    python: str
    #: Where the spec's relative paths start.
    base_dir: str
    connect_timeout_s: float = 10.0
    accept_new_host_keys: bool = False
    #: A local agent started while tfcluster was starting (the local engines take it).
    early: EarlyAgent | None = None
    #: The first attempt this process runs (a resumed run's is past its earlier attempts).
    first_attempt: int = 0


class Session(Protocol):
    """One run of a job on an engine, from before its first attempt to its exit code."""

    #: Signals that stop the job gracefully, besides SIGINT, SIGTERM and SIGHUP.
    stop_signals: tuple[signal.Signals, ...]
    #: Too few usable hosts end the run through :meth:`running` (to be run again without the
    #: lost ones, as a requeued Slurm job is), not as a failed job.
    requeues_without_hosts: bool

    def attempt_events(self, attempt: int, history: Sequence[PastAttempt],
                       hosts: Sequence[HostPlan]) -> Sequence[Event]:
        """The engine's events for the start of ``attempt`` on ``hosts``, after the attempts
        ``history``."""
        ...

    def summary(self, history: Sequence[PastAttempt]) -> Mapping[str, Any]:
        """The engine's top-level sections of ``summary.json``."""
        ...

    def running(self, run_dir: Path) -> AbstractContextManager[None]:
        """Around the job loop: where the engine turns its own end of a run (no usable host
        left) into what it leaves in ``run_dir`` and :attr:`exit_code`."""
        ...

    @property
    def exit_code(self) -> int | None:
        """The run's exit code when the engine ended it (None: the job's own)."""
        ...


class Backend(Protocol):
    """An engine, for one run (see the module docstring)."""

    #: The engine's name (its module under ``launcher.backends``).
    name: str
    #: How the coordinator reaches the chief's checkpoint directory.
    chief_files: ChiefFiles
    #: Whether ``tfcluster run`` probes every host before it starts anything (a run of this
    #: machine alone finds its problems as fast by starting).
    probes_before_run: bool

    def place(self, spec: ClusterSpec, history: Sequence[PastAttempt]) -> Placement:
        """Where the next attempt's tasks run, after the attempts in ``history``. Asked anew for
        every attempt (and every preview): never cached, so what changed is always seen.
        For a spec with a pool (``placement:``), what :meth:`pool` gives is placed instead, by
        :class:`~launcher.plan.pool.HostPool`."""
        ...

    def pool(self, spec: ClusterSpec) -> tuple[PlacedHost, ...]:
        """The hosts a pool spec's tasks may be placed on, in order (``placement.hosts``; a
        scheduler's allocation)."""
        ...

    def start_agent(self, host: HostPlan, launch: Launch, sink: Sink,
                    log_path: Path) -> AgentHandle:
        """Start ``host``'s agent and send it ``launch``; raises AgentStartError (or an
        SshError) with nothing of that agent left running."""
        ...

    def probe(self, launch_plan: LaunchPlan) -> PreflightReport:
        """Pre-flight: the probe run where each host's agent would run, every host at once."""
        ...

    def plan_lines(self, launch_plan: LaunchPlan) -> list[str]:
        """What ``tfcluster plan`` adds for this engine (e.g. each job step's command line)."""
        ...

    def session(self) -> Session:
        """A new run's session."""
        ...

    def close(self) -> None:
        """End what the engine started besides the agents (an early agent no host took).
        Safe to call more than once."""
        ...


@runtime_checkable
class ProbesHosts(Protocol):
    """Optional, a :class:`Backend`'s: how a command, or a program tfcluster keeps talking to,
    runs on each host of a plan, exactly where that host's agent would run (pre-flight's probe,
    ``tfcluster doctor``'s measuring program)."""

    def probe_runner(self, launch_plan: LaunchPlan) -> ProbeRunner:
        """The runner for ``launch_plan``'s hosts."""
        ...


class Submitter(Protocol):
    """An engine that schedules a whole run for later (``tfcluster submit``): first the request,
    printable and checked (``--dry-run`` shows it), then its submission, the only side effect."""

    def dryrun(self, spec: ClusterSpec, spec_path: str, options: Mapping[str, Any]) -> Any:
        """The request, checked against ``spec``; raises UsageError naming the option."""
        ...

    def show(self, request: Any) -> str:
        """The request as a person reads it (what ``--dry-run`` prints)."""
        ...

    def schedule(self, request: Any) -> str:
        """Submit ``request``; the scheduler's job id."""
        ...


class LostHost(Protocol):
    """One host a drill takes away for good and gives back (``lose-host``, ``heal``)."""

    def take_down(self) -> str: ...
    def enforce(self) -> list[str]: ...
    def bring_back(self) -> str: ...


class LocateLostHost(Protocol):
    """Optional, an engine module's ``locate_lost_host``: ``host`` of the run of ``job`` made
    ready to be lost (raises TfclusterError, saying why it cannot be). ``run`` runs the
    scheduler's commands (tests give their own)."""

    def __call__(self, host: str, job: str, environ: Mapping[str, str],
                 run: Callable[[Sequence[str]], str] = ...) -> LostHost: ...


class EngineModule(Protocol):
    """What ``launcher.backends.<name>`` provides."""

    def create(self, spec: ClusterSpec, options: EngineOptions) -> Backend:
        """The engine for one run of ``spec``."""
        ...

    def size(self, spec: ClusterSpec) -> str:
        """Where ``spec`` runs, in words (``tfcluster validate``: "3 task(s) on 2 host(s)")."""
        ...
