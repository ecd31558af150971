"""The local engine: every task on this machine, where the spec's tasks name it, each host's agent
a subprocess (:class:`~launcher.backends.local.transport.LocalTransport`). The SSH engine is this
one with remote hosts reached over SSH."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.backends.base import AgentHandle, Sink, Transport
from launcher.backends.engine import EngineOptions, Session
from launcher.backends.local.transport import LocalTransport
from launcher.backends.session import PlainSession
from launcher.chief.access import LOCAL_ONLY, ChiefFiles
from launcher.plan.addresses import local_task_address
from launcher.plan.placement import (
    PastAttempt,
    PlacedHost,
    Placement,
    listed_pool,
    named_placement,
)
from launcher.plan.planner import HostPlan, LaunchPlan
from launcher.spec.model import ClusterSpec
from worker.wire.protocol import Launch

if TYPE_CHECKING:
    from launcher.preflight.report import PreflightReport
    from launcher.preflight.runner import ProbeRunner


def size(spec: ClusterSpec) -> str:
    pool = spec.pool
    if pool is not None and pool.hosts is not None:
        return f"{len(spec.task_slots())} task(s) from a pool of {len(pool.hosts)} host(s)"
    slots = spec.task_slots()
    return f"{len(slots)} task(s) on {len({s.host for s in slots})} host(s)"


def create(spec: ClusterSpec, options: EngineOptions) -> LocalBackend:
    return LocalBackend(spec, options)


class LocalBackend:
    """Tasks on the hosts the spec names, each agent started by :meth:`transport` (this
    machine's here; the SSH engine overrides it for remote hosts, and nothing else)."""

    name = "local"
    chief_files: ChiefFiles = LOCAL_ONLY
    probes_before_run = False

    def __init__(self, spec: ClusterSpec, options: EngineOptions) -> None:
        self.spec = spec
        self.options = options
        self.local = LocalTransport(python=options.python, early=options.early)

    def place(self, spec: ClusterSpec, history: Sequence[PastAttempt]) -> Placement:
        return named_placement(spec, local_python=self.options.python,
                               local_address=local_task_address(spec))

    def pool(self, spec: ClusterSpec) -> tuple[PlacedHost, ...]:
        return listed_pool(spec, local_python=self.options.python,
                           local_address=local_task_address(spec))

    def transport(self, host: HostPlan) -> Transport:
        return self.local

    def start_agent(self, host: HostPlan, launch: Launch, sink: Sink,
                    log_path: Path) -> AgentHandle:
        return self.transport(host).start(host, launch, sink, log_path)

    def probe(self, launch_plan: LaunchPlan) -> PreflightReport:
        from launcher.preflight.group import run_preflight

        return run_preflight(launch_plan, self.probe_runner(launch_plan))

    def probe_runner(self, launch_plan: LaunchPlan) -> ProbeRunner:
        """How a command runs on each host (:class:`~launcher.backends.engine.ProbesHosts`):
        this machine's hosts as child processes."""
        from launcher.backends.local.probe import LocalProbeRunner

        early = self.options.early
        return LocalProbeRunner(self.options.connect_timeout_s,
                                early=None if early is None else early.probe)

    def plan_lines(self, launch_plan: LaunchPlan) -> list[str]:
        return []

    def session(self) -> Session:
        return PlainSession()

    def launch_early(self, launch_plan: LaunchPlan) -> bool:
        """Send the first attempt's launch to the agent started early, if it still waits and
        the plan is one it can run: every task on one host, this machine (one agent). The
        agent's start then takes it, and checks it is sent this very launch."""
        early = self.options.early
        if early is None or len(launch_plan.hosts) != 1 or not launch_plan.hosts[0].local \
                or not early.waiting(self.options.python):
            return False
        return early.launch(launch_plan.launch_message(launch_plan.hosts[0]))

    def close(self) -> None:
        self.local.discard_early()
