"""The Slurm engine: a spec with ``slurm:`` runs on the allocation it is started in.

- placement: the tasks on the allocation's usable nodes, asked again every attempt (the
  allocation is the run's host pool: :mod:`launcher.backends.slurm.placement`); a requeued job
  continues its run directory with
  ``tfcluster run --resume`` (the batch script's choice);
- agents start as job steps (:class:`~launcher.backends.slurm.steps.StepTransport`);
- pre-flight runs the one probe as a job step on every node (:mod:`.probe`);
- the checkpoint directory is shared by every node, so the coordinator reads and locks it as a
  local one;
- the run's session (:mod:`.session`): SIGUSR1, the ``slurm_attempt`` events, the ``slurm``
  section of ``summary.json``, and exit 75 to be resubmitted without the nodes that failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.backends.base import AgentHandle, Sink
from launcher.backends.engine import EngineOptions, Session
from launcher.backends.slurm.allocation import Allocation, read_allocation
from launcher.backends.slurm.placement import node_pool
from launcher.backends.slurm.session import SlurmSession
from launcher.backends.slurm.steps import StepTransport, step_argv
from launcher.chief.access import SHARED, ChiefFiles
from launcher.plan.placement import PastAttempt, PlacedHost, Placement
from launcher.plan.planner import HostPlan, LaunchPlan
from launcher.plan.pool import HostPool
from launcher.spec.model import ClusterSpec
from worker.wire.protocol import Launch

if TYPE_CHECKING:
    from launcher.preflight.report import PreflightReport
    from launcher.preflight.runner import ProbeRunner


class SlurmBackend:
    """One run of a Slurm spec on ``allocation`` (default: the one this process runs in)."""

    name = "slurm"
    chief_files: ChiefFiles = SHARED
    probes_before_run = True

    def __init__(self, spec: ClusterSpec, options: EngineOptions,
                 allocation: Allocation | None = None, srun: str | None = None) -> None:
        self.spec = spec
        self.options = options
        self.allocation = allocation or read_allocation()
        self.transport = StepTransport(srun)

    def place(self, spec: ClusterSpec, history: Sequence[PastAttempt]) -> Placement:
        """The first placement from the allocation (every attempt of a run is placed by the
        run's :class:`~launcher.plan.pool.HostPool`)."""
        return HostPool(spec, self.pool(spec)).place()

    def pool(self, spec: ClusterSpec) -> tuple[PlacedHost, ...]:
        return node_pool(spec, self.allocation.nodes, python=self.options.python)

    def start_agent(self, host: HostPlan, launch: Launch, sink: Sink,
                    log_path: Path) -> AgentHandle:
        return self.transport.start(host, launch, sink, log_path)

    def probe(self, launch_plan: LaunchPlan) -> PreflightReport:
        from launcher.backends.slurm.probe import slurm_preflight

        return slurm_preflight(launch_plan, self.transport.srun)

    def probe_runner(self, launch_plan: LaunchPlan) -> ProbeRunner:
        """Each node's command as a job step (``tfcluster doctor`` uses it)."""
        from launcher.backends.slurm.probe import StepProbeRunner

        return StepProbeRunner(launch_plan.job, self.transport.srun)

    def plan_lines(self, launch_plan: LaunchPlan) -> list[str]:
        """Each node's srun line and tasks."""
        lines = ["", "slurm job steps (one agent per node):"]
        for host in launch_plan.hosts:
            tasks = ", ".join(f"{t.task}@{host.address}:{t.port}" for t in host.tasks)
            lines.append(f"  {host.name}: {tasks}")
            lines.append(f"    {' '.join(step_argv(host, launch_plan.job))}")
        return lines

    def session(self) -> Session:
        return SlurmSession(self.spec, self.allocation, self.options.first_attempt)

    def close(self) -> None:
        """Nothing to end: the steps are agents, closed by the coordinator."""


def create(spec: ClusterSpec, options: EngineOptions) -> SlurmBackend:
    return SlurmBackend(spec, options)


def size(spec: ClusterSpec) -> str:
    from launcher.backends.slurm.placement import nodes_to_allocate

    return f"{len(spec.task_slots())} task(s) on {nodes_to_allocate(spec)} Slurm node(s)"
