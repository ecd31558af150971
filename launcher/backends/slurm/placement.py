"""Placing a job on a Slurm allocation, attempt after attempt (pure).

The spec's tasks go on the allocation's usable nodes in order, ``slurm.tasks_per_node`` each,
the chief on the first, task ``k`` (chief, workers, evaluator) on port ``slurm.port + k``; every
node sees this machine's file system at the same paths (the spec's relative paths are resolved
here). A node whose agent was lost in an attempt of this allocation is left out once a spare can
take its place (``slurm.spare_nodes``), or after ``slurm.max_node_failures`` lost attempts when
none can; when too few nodes are left, :class:`NodesExhausted` names the nodes to exclude from a
requeue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from launcher.backends.slurm.allocation import SlurmNode
from launcher.errors import TfclusterError
from launcher.plan.placement import PastAttempt, PlacedHost, PlacedTask, Placement
from launcher.spec.model import ClusterSpec
from launcher.spec.placement import SlurmPlacement, nodes_needed
from worker.wire.tfconfig import TaskId, task_order


class TooFewNodes(TfclusterError):
    def __init__(self, have: int, need: int, placement: SlurmPlacement, tasks: int) -> None:
        self.have, self.need = have, need
        spares = f" + {placement.spare_nodes} spare" if placement.spare_nodes else ""
        super().__init__(f"the allocation has {have} node(s) but the spec needs {need}{spares} "
                         f"({tasks} task(s), slurm.tasks_per_node {placement.tasks_per_node}): "
                         f"allocate {need + placement.spare_nodes} nodes (salloc/sbatch "
                         "--nodes, tfcluster submit --nodes)")


class NodesExhausted(TfclusterError):
    """Too few good nodes are left for the next attempt; ``bad`` should be excluded."""

    def __init__(self, bad: Sequence[str], need: int) -> None:
        self.bad = tuple(bad)
        super().__init__(f"too few usable nodes left for the next attempt (need {need}); lost "
                         f"agents on {', '.join(self.bad)}: requeue the job without them "
                         f"(sbatch --exclude={','.join(self.bad)})")


def slurm_task_order(spec: ClusterSpec) -> list[TaskId]:
    """Every task of the spec, chief first (then workers, then the evaluator)."""
    return sorted((slot.task for slot in spec.task_slots()), key=task_order)


def placement_of(spec: ClusterSpec) -> SlurmPlacement:
    if spec.slurm is None:
        raise TfclusterError("this spec has no slurm section")
    return spec.slurm


@dataclass(frozen=True)
class NodeLosses:
    """Which attempts of this allocation lost their agent on which node."""

    lost: Mapping[str, frozenset[int]]

    @classmethod
    def of(cls, history: Sequence[PastAttempt], since_attempt: int) -> NodeLosses:
        """The losses of the attempts from ``since_attempt`` on (those of this allocation: a
        requeued job's earlier attempts ran on nodes it may not have)."""
        lost: dict[str, set[int]] = {}
        for past in history:
            if past.attempt >= since_attempt:
                for host in past.lost_hosts:
                    lost.setdefault(host, set()).add(past.attempt)
        return cls({host: frozenset(attempts) for host, attempts in lost.items()})

    def failures(self, node: str) -> int:
        return len(self.lost.get(node, ()))


def bad_nodes(spec: ClusterSpec, nodes: Sequence[SlurmNode], losses: NodeLosses) -> list[str]:
    """Nodes left out of the next attempt: lost once with spares, else too often."""
    placement = placement_of(spec)
    limit = 1 if placement.spare_nodes else placement.max_node_failures
    return [n.name for n in nodes if losses.failures(n.name) >= limit]


def usable_nodes(spec: ClusterSpec, nodes: Sequence[SlurmNode],
                 losses: NodeLosses) -> list[SlurmNode]:
    """The nodes the next attempt runs on, in the allocation's order (spares left unused)."""
    placement = placement_of(spec)
    order = slurm_task_order(spec)
    need = nodes_needed(placement, len(order))
    if len(nodes) < need:
        raise TooFewNodes(len(nodes), need, placement, len(order))
    bad = set(bad_nodes(spec, nodes, losses))
    good = [node for node in nodes if node.name not in bad]
    if len(good) < need:
        raise NodesExhausted(sorted(bad), need)
    return good[:need]


def place(spec: ClusterSpec, nodes: Sequence[SlurmNode], losses: NodeLosses, *,
          python: str) -> Placement:
    """``spec``'s tasks on the usable ``nodes`` (see the module docstring)."""
    placement = placement_of(spec)
    used = usable_nodes(spec, nodes, losses)
    interpreter = spec.python or python
    hosts = tuple(PlacedHost(name=node.name, address=node.address, local=False,
                             python=interpreter, resolves_paths=True,
                             where=f"slurm node at {node.address}, a job step")
                  for node in used)
    tasks = tuple(PlacedTask(task, used[k // placement.tasks_per_node].name, placement.port + k)
                  for k, task in enumerate(slurm_task_order(spec)))
    return Placement(hosts=hosts, tasks=tasks)
