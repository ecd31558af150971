"""Agents on the nodes of a Slurm allocation: ``python -m worker.agent`` as one job step per node.

Each node's agent is started by ``srun --nodes=1 --ntasks=1 --nodelist=NODE --overlap ...``
(:func:`launcher.backends.slurm.srun.agent_step_argv`, no shell) as a subprocess of the coordinator and
spoken to over srun's stdin / stdout exactly as a local agent is over its pipes: srun forwards
both to the step. srun's EOF on stdin reaches the agent, which then kills every task tree and
exits; if the coordinator dies, its pipes close the same way, and Slurm ends whatever step is
left when the allocation ends. A step that is lost (the node died, slurmstepd was killed) ends
srun's output: an ``AgentClosed``, i.e. a lost host.
"""

from __future__ import annotations

from pathlib import Path

from launcher.backends.base import Sink
from launcher.backends.early_agent import agent_popen
from launcher.backends.local.transport import LocalAgentHandle, launched
from launcher.backends.slurm.srun import agent_step_argv
from launcher.errors import AgentStartError
from launcher.plan.planner import HostPlan
from worker.wire.protocol import Launch
from worker.wire.safe_open import open_appending_bytes


def step_argv(host: HostPlan, job: str) -> list[str]:
    """The srun line of ``host``'s agent (what ``tfcluster plan`` shows, too)."""
    workdir = host.tasks[0].cwd if host.tasks else "."
    return agent_step_argv(host.name, job=job, workdir=workdir, python=host.python)


class StepTransport:
    """Starts each node's agent as a job step (see the module docstring)."""

    def __init__(self, srun: str | None = None) -> None:
        self.srun = srun  # another srun binary (tests); None: the one on PATH

    def start(self, host: HostPlan, launch: Launch, sink: Sink,
              log_path: Path) -> LocalAgentHandle:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = step_argv(host, launch.job)
        if self.srun is not None:
            argv[0] = self.srun
        with open_appending_bytes(log_path) as log:
            log.write(f"tfcluster: {' '.join(argv)}\n".encode())
            log.flush()
            try:
                proc = agent_popen(argv, log)
            except OSError as exc:
                raise AgentStartError(host.name, f"cannot start {argv[0]!r}: {exc}",
                                      "run inside a Slurm allocation with srun on PATH") from exc
        # The agent's process table lives on the node: a killed step's leftovers are Slurm's
        # to end (the step's processes), so nothing is killed from here by pid.
        return launched(host.name, proc, launch, sink, process_table=None)
