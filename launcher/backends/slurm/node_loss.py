"""``lose-host:NODE`` on a Slurm allocation: the node's agent job step killed and the node drained,
for good, until ``heal`` (or the end of the drill) resumes it.

Taking the node away drains it (``scontrol update nodename=NODE state=drain
reason=tfcluster-drill``), then sends SIGKILL (``scancel --signal=KILL JOBID.STEPID``) to every
step of the job on that node that carries the name tfcluster gives its agent steps
(:func:`launcher.backends.slurm.srun.agent_step_name`): the agent dies, its ``srun`` ends
and the coordinator loses the host. The allocation's other steps (``batch``, ``extern``, an
interactive shell the coordinator may run in) are left alone. A drained node still runs new steps
of the allocation it belongs to, so while the node is lost :meth:`SlurmNodeLoss.enforce` is called
again and again (:class:`launcher.drill.host_loss.HostLosses` does, every
:data:`launcher.drill.host_loss.WATCH_S`) and kills any such step started there since (a
restart's agent, a readmission probe). Giving it back resumes it (``state=resume``).

Refused before the drill starts (:func:`locate_node`), one line saying why: outside an allocation
(``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST``), a host that is not one of its nodes, a node drained
already (the drill would resume it at the end). Root is checked by the caller. The drill finds it
through the registry (:func:`launcher.backends.host_loss_for`): the engine's ``locate_lost_host``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from launcher.backends.slurm.commands import SlurmError, slurm_command
from launcher.backends.slurm.srun import agent_step_name

JOB_ID = "SLURM_JOB_ID"
NODELIST = "SLURM_JOB_NODELIST"
#: The reason a drained node shows (``sinfo -R``), so that an operator knows who drained it.
DRAIN_REASON = "tfcluster-drill"
#: Runs a command (argv, no shell) and returns its standard output; raises SlurmError.
Run = Callable[[Sequence[str]], str]


def run_command(argv: Sequence[str]) -> str:
    return slurm_command(argv)


class SlurmNodeError(SlurmError):
    """A node cannot be taken away; the message says which and why."""


def _fields(line: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


@dataclass(frozen=True)
class SlurmNodeLoss:
    """One node of allocation ``job_id`` that the drill can take away (see the module)."""

    node: str
    job_id: str
    step_name: str  # the name of the job's agent steps: tfcluster-<job>
    run: Run = run_command

    def take_down(self) -> str:
        """Drain the node and kill the job's agent steps on it; what was done."""
        self.run(["scontrol", "update", f"nodename={self.node}", "state=drain",
                  f"reason={DRAIN_REASON}"])
        killed = self.enforce()
        return (f"slurm node {self.node} drained, agent step {', '.join(killed)} killed" if killed
                else f"slurm node {self.node} drained (no agent step of the job ran there)")

    def enforce(self) -> list[str]:
        """SIGKILL every agent step of the job on the node (one started since, too); their ids."""
        steps = self.agent_steps()
        if steps:
            self.run(["scancel", "--signal=KILL", *steps])
        return steps

    def agent_steps(self) -> list[str]:
        """``JOBID.STEPID`` of each step of the job named :attr:`step_name` on the node."""
        text = self.run(["squeue", "--steps", f"--jobs={self.job_id}", "--noheader",
                         "--format=%i|%j|%N"])
        found = []
        for line in text.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3 and parts[1] == self.step_name and parts[2] == self.node:
                found.append(parts[0])
        return found

    def bring_back(self) -> str:
        """Resume the node; what was done. Safe to call more than once: a node that is not
        drained (any more) is left as it is (Slurm refuses to resume it)."""
        state = node_state(self.node, self.run)
        if "DRAIN" not in state.upper():
            return f"slurm node {self.node} not drained (State={state}): left as it is"
        self.run(["scontrol", "update", f"nodename={self.node}", "state=resume"])
        return f"slurm node {self.node} resumed"


def node_state(node: str, run: Run = run_command) -> str:
    """``node``'s ``State`` as ``scontrol show node`` gives it (e.g. ``MIXED+DRAIN``)."""
    shown = run(["scontrol", "show", "node", "-o", node])
    return next((f.get("State", "") for line in shown.splitlines()
                 if (f := _fields(line)).get("NodeName") == node), "")


def locate_node(node: str, job: str, environ: Mapping[str, str],
                run: Run = run_command) -> SlurmNodeLoss:
    """``node`` of the allocation named by ``environ``, ready to be taken away; a
    :class:`SlurmNodeError` saying why it cannot be."""
    job_id, nodelist = environ.get(JOB_ID), environ.get(NODELIST)
    if not job_id or not nodelist:
        raise SlurmNodeError(f"the spec runs on a Slurm allocation, but {JOB_ID} is not set: run "
                             "the drill inside the allocation (salloc, or an sbatch script)")
    nodes = run(["scontrol", "show", "hostnames", nodelist]).split()
    if node not in nodes:
        raise SlurmNodeError(f"not a node of Slurm job {job_id} (nodes: {', '.join(nodes)})")
    state = node_state(node, run)
    if "DRAIN" in state.upper():
        raise SlurmNodeError(f"Slurm node {node} is drained already (State={state}): the drill "
                             "would resume it at the end")
    return SlurmNodeLoss(node, job_id, agent_step_name(job), run)
