"""Where tasks run when a scheduler chooses the machines: the spec's ``slurm:`` section.

A spec with ``slurm:`` names no hosts: its ``tasks`` are types and counts only, and at run time
they are placed on the nodes of the Slurm allocation tfcluster runs in (``salloc``, or an
``sbatch`` script written by ``tfcluster submit``), in Slurm's node order, ``tasks_per_node`` on
each node, the chief on the first. Ports are ``port``, ``port+1``, ... in task order (chief,
workers, evaluator), the same on every node, so they never clash even when several Slurm nodes
share one machine.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Protocol

from pydantic import BaseModel, ConfigDict, Field

_MAX_PORT = 65535
#: A task's host when the spec names none (what a stored spec spells out).
DEFAULT_HOST = "localhost"


class SlurmPlacement(BaseModel):
    """``slurm:`` in a spec: place the tasks on the allocation's nodes (see the module doc)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    #: Tasks started on each node (one agent per node starts them all).
    tasks_per_node: Annotated[int, Field(strict=True, ge=1, le=64)] = 1
    #: Nodes allocated beyond those the tasks need; a node whose agent is lost is left out of
    #: the next attempt and the first spare takes its place.
    spare_nodes: Annotated[int, Field(strict=True, ge=0, le=64)] = 0
    #: The first task's port; task ``k`` (in chief, worker, evaluator order) listens on port+k.
    port: Annotated[int, Field(strict=True, ge=1024, le=_MAX_PORT)] = 23456
    #: Without a spare to move to: how many attempts may lose their agent on one node before
    #: the job stops and asks to be requeued without that node (``tfcluster submit`` jobs are).
    max_node_failures: Annotated[int, Field(strict=True, ge=1, le=100)] = 2


class PlacedTask(Protocol):
    """A ``tasks:`` entry as the placement rules read it."""

    @property
    def count(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int | None: ...


def nodes_needed(placement: SlurmPlacement, tasks: int) -> int:
    """Nodes the tasks occupy (the spares not counted)."""
    return -(-tasks // placement.tasks_per_node)


def placement_problems(placement: SlurmPlacement, tasks: Sequence[PlacedTask],
                       hosts: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(field path, message) for each way the spec contradicts Slurm placement."""
    if hosts:
        yield ("hosts", "must be empty with slurm: the allocation's nodes are the hosts "
               "(remove hosts, or remove slurm to name the hosts yourself)")
    for position, task in enumerate(tasks):
        if task.host != DEFAULT_HOST:
            yield (f"tasks[{position}].host", "must not be set with slurm: tasks are placed on "
                   "the allocation's nodes (remove host)")
        if task.port is not None:
            yield (f"tasks[{position}].port", "must not be set with slurm: ports are slurm.port, "
                   "slurm.port+1, ... in task order (set slurm.port instead)")
    total = sum(task.count for task in tasks)
    if placement.port + total - 1 > _MAX_PORT:
        yield ("slurm.port", f"ports {placement.port}..{placement.port + total - 1} go past "
               f"{_MAX_PORT}: lower slurm.port")
