"""The pool of a Slurm job: the nodes of the allocation it runs in (pure).

The spec's tasks are placed from this pool by :class:`~launcher.plan.pool.HostPool`, like any
pool's (``placement:``, or ``slurm:``'s old fields): in Slurm's node order, ``tasks_per_host`` on
each, the chief on the first, task ``k`` on port ``port + k``. Every node sees this machine's file
system at the same paths (the spec's relative paths are resolved here).
"""

from __future__ import annotations

from collections.abc import Sequence

from launcher.backends.slurm.allocation import SlurmNode
from launcher.errors import TfclusterError
from launcher.plan.placement import PlacedHost
from launcher.plan.pool import training_order
from launcher.spec.model import ClusterSpec
from launcher.spec.placement import PlacementSpec, hosts_needed


class TooFewNodes(TfclusterError):
    def __init__(self, have: int, need: int, placement: PlacementSpec, tasks: int) -> None:
        self.have, self.need = have, need
        spares = f" + {placement.spares} spare" if placement.spares else ""
        super().__init__(f"the allocation has {have} node(s) but the spec needs {need}{spares} "
                         f"({tasks} task(s), placement.tasks_per_host "
                         f"{placement.tasks_per_host}): allocate {need + placement.spares} nodes "
                         "(salloc/sbatch --nodes, tfcluster submit --nodes)")


def placement_of(spec: ClusterSpec) -> PlacementSpec:
    if spec.pool is None or spec.engine != "slurm":
        raise TfclusterError("this spec has no slurm section")
    return spec.pool


def nodes_to_allocate(spec: ClusterSpec) -> int:
    """Nodes the spec's tasks need at full size, plus its spares."""
    placement = placement_of(spec)
    return hosts_needed(placement, len(training_order(spec))) + placement.spares


def node_pool(spec: ClusterSpec, nodes: Sequence[SlurmNode], *,
              python: str) -> tuple[PlacedHost, ...]:
    """The allocation's ``nodes`` as the job's pool. Raises :class:`TooFewNodes` when the
    allocation cannot hold the job at full size."""
    placement = placement_of(spec)
    tasks = len(training_order(spec))
    need = hosts_needed(placement, tasks)
    if len(nodes) < need:
        raise TooFewNodes(len(nodes), need, placement, tasks)
    interpreter = spec.python or python
    return tuple(PlacedHost(name=node.name, address=node.address, local=False,
                            python=interpreter, resolves_paths=True,
                            where=f"slurm node at {node.address}, a job step")
                 for node in nodes)
