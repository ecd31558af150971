"""Planning on a Slurm allocation: the spec's tasks placed on the allocation's nodes, per attempt.

:func:`place` turns a spec with ``slurm:`` and a list of nodes into the plain spec the planner
knows (one declared host per node, explicit ports), so everything after it — TF_CONFIG, env,
``tfcluster plan``, the coordinator — is the same as for named hosts. :class:`SlurmPlanner` does
that for each attempt with the nodes still usable: a node whose agent was lost
(:class:`NodeHealth` counts it from the job's events) is left out once a spare can take its place
(``slurm.spare_nodes``), or after ``slurm.max_node_failures`` lost attempts when none can; when
too few nodes are left the plan raises :class:`NodesExhausted`, which names the nodes to exclude
from a requeue.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from launcher.plan.planner import LaunchPlan, PlanError, Planner, ResumePoint, plan
from launcher.slurm.allocation import SlurmNode
from launcher.spec.loading import spec_from_dict
from launcher.spec.model import ClusterSpec
from launcher.spec.placement import SlurmPlacement, nodes_needed
from worker.tfconfig import TaskId, task_order

#: The failure kind (``task_failed`` events) that means a node's agent or step was lost.
LOST_HOST = "lost_host"


class TooFewNodes(PlanError):
    def __init__(self, have: int, need: int, placement: SlurmPlacement, tasks: int) -> None:
        self.have, self.need = have, need
        spares = f" + {placement.spare_nodes} spare" if placement.spare_nodes else ""
        super().__init__(f"the allocation has {have} node(s) but the spec needs {need}{spares} "
                         f"({tasks} task(s), slurm.tasks_per_node {placement.tasks_per_node}): "
                         f"allocate {need + placement.spare_nodes} nodes (salloc/sbatch "
                         "--nodes, tfcluster submit --nodes)")


class NodesExhausted(PlanError):
    """Too few good nodes are left for the next attempt; ``bad`` should be excluded."""

    def __init__(self, bad: Sequence[str], need: int) -> None:
        self.bad = tuple(bad)
        super().__init__(f"too few usable nodes left for the next attempt (need {need}); lost "
                         f"agents on {', '.join(self.bad)}: requeue the job without them "
                         f"(sbatch --exclude={','.join(self.bad)})")


def slurm_task_order(spec: ClusterSpec) -> list[TaskId]:
    """Every task of the spec, chief first (then workers, then the evaluator)."""
    return sorted((slot.task for slot in spec.task_slots()), key=task_order)


def place(spec: ClusterSpec, nodes: Sequence[SlurmNode], *, base_dir: str,
          python: str) -> ClusterSpec:
    """``spec`` with its tasks on ``nodes`` (in order, ``tasks_per_node`` each, chief first),
    one declared host per node, ports ``slurm.port + k``, and paths made absolute (every node
    sees the same shared filesystem as this one)."""
    placement = spec.slurm
    if placement is None:
        raise PlanError("this spec has no slurm section")
    order = slurm_task_order(spec)
    need = nodes_needed(placement, len(order))
    if len(nodes) < need:
        raise TooFewNodes(len(nodes), need, placement, len(order))
    used = nodes[:need]
    data: dict[str, Any] = spec.model_dump(exclude={"slurm", "hosts", "tasks"},
                                           exclude_unset=True)
    data["hosts"] = {node.name: {"address": node.address} for node in used}
    data["tasks"] = [{"type": task.type, "host": used[k // placement.tasks_per_node].name,
                      "port": placement.port + k} for k, task in enumerate(order)]
    data["python"] = spec.python or python
    data["workdir"] = _absolute(spec.workdir, base_dir)
    if spec.checkpoint is not None:
        data["checkpoint"] = {"dir": _absolute(spec.checkpoint.dir, base_dir)}
    return spec_from_dict(data, source="the spec placed on the Slurm allocation")


def _absolute(path: str, base_dir: str) -> str:
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(path)))


@dataclass
class NodeHealth:
    """Which attempts lost their agent on which node, from the job's events (an event listener)."""

    lost: dict[str, set[int]] = field(default_factory=dict)

    def __call__(self, record: Mapping[str, Any]) -> None:
        if record.get("event") == "task_failed" and record.get("kind") == LOST_HOST:
            host, attempt = record.get("host"), record.get("attempt")
            if isinstance(host, str) and isinstance(attempt, int):
                self.lost.setdefault(host, set()).add(attempt)

    def failures(self, node: str) -> int:
        return len(self.lost.get(node, ()))


@dataclass(frozen=True)
class SlurmPlanner(Planner):
    """A :class:`Planner` whose hosts are the allocation's usable nodes (see the module doc).
    ``spec`` is the placement on the first nodes; ``source`` the spec as written."""

    source: ClusterSpec | None = None
    nodes: tuple[SlurmNode, ...] = ()
    health: NodeHealth = field(default_factory=NodeHealth)

    @classmethod
    def create(cls, spec: ClusterSpec, nodes: Sequence[SlurmNode], *, run_dir: str,
               python: str, base_dir: str) -> SlurmPlanner:
        placed = place(spec, nodes, base_dir=base_dir, python=python)
        return cls(spec=placed, run_dir=run_dir, local_python=python, base_dir=base_dir,
                   source=spec, nodes=tuple(nodes))

    @property
    def placement(self) -> SlurmPlacement:
        if self.source is None or self.source.slurm is None:
            raise PlanError("a SlurmPlanner needs a spec with a slurm section")
        return self.source.slurm

    def bad_nodes(self) -> list[str]:
        """Nodes left out of the next attempt: lost once with spares, else too often."""
        limit = 1 if self.placement.spare_nodes else self.placement.max_node_failures
        return [n.name for n in self.nodes if self.health.failures(n.name) >= limit]

    def usable_nodes(self) -> list[SlurmNode]:
        """The nodes the next attempt runs on, in the allocation's order (spares left unused)."""
        bad = set(self.bad_nodes())
        good = [node for node in self.nodes if node.name not in bad]
        need = nodes_needed(self.placement, len(self.spec.task_slots()))
        if len(good) < need:
            raise NodesExhausted(sorted(bad), need)
        return good[:need]

    def plan(self, attempt: int, ports: Mapping[TaskId, int] | None = None,
             resume: ResumePoint | None = None) -> LaunchPlan:
        if self.source is None:
            raise PlanError("a SlurmPlanner needs the spec as written")
        placed = place(self.source, self.usable_nodes(), base_dir=self.base_dir,
                       python=self.local_python)
        return plan(placed, attempt=attempt, run_dir=self.run_dir, ports=ports, resume=resume,
                    local_python=self.local_python, base_dir=self.base_dir,
                    local_address=self.local_address)
