"""Placing tasks from a pool of hosts: the spec's ``placement:`` section (and ``slurm:``).

With ``placement:`` the tasks name no host: every attempt they are placed on the pool's usable
hosts in order, ``tasks_per_host`` on each, the chief first (then the workers, then the
evaluator), task ``k`` of that order on port ``port + k`` (the same task keeps its port on any
host, and hosts that share one machine's network, such as Slurm nodes of one box, never clash).
Hosts beyond what the tasks need are spares. The pool is ``placement.hosts`` (names declared under
``hosts``, or this machine's), or, with ``slurm:``, the nodes of the allocation tfcluster runs in.

A host whose agent was lost, whose probe fails at a restart, or that failed
``exclude_after_failures`` attempts in a row is left out; a spare takes its place, or the job runs
smaller down to ``min_workers`` training tasks (chief included); below that the coordinator waits
``wait_for_hosts_s`` for hosts to return. A left-out host is probed again after
``readmit_after_s`` and is usable once healthy.

``slurm:`` used to carry ``tasks_per_node``, ``spare_nodes``, ``port`` and ``max_node_failures``:
they are still accepted, each with a line saying what replaces it (:func:`renamed_fields`). A
Slurm spec without ``placement:`` does not wait for nodes: with too few, the run ends at once and
asks to be requeued without the lost ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Protocol

from pydantic import BaseModel, ConfigDict, Field

_MAX_PORT = 65535
#: A task's host when the spec names none (what a stored spec spells out).
DEFAULT_HOST = "localhost"
_FROZEN = ConfigDict(extra="forbid", frozen=True, defer_build=True)
_Count = Annotated[int, Field(strict=True, ge=1, le=64)]
_Seconds = Annotated[float, Field(strict=True, gt=0, le=7 * 86400, allow_inf_nan=False)]


class PlacementSpec(BaseModel):
    """``placement:`` in a spec: place the tasks from a pool of hosts (see the module doc)."""

    model_config = _FROZEN

    hosts: Annotated[list[str], Field(min_length=1)] | None = Field(default=None,
        description="The pool, in order; omitted: the Slurm allocation's nodes.")
    tasks_per_host: _Count = Field(default=1,
        description="Tasks started on each host (one agent per host starts them all).")
    port: Annotated[int, Field(strict=True, ge=1024, le=_MAX_PORT)] = Field(default=23456,
        description="The first task's port; task `k` (chief, workers, evaluator) listens on port + k.")
    min_workers: Annotated[int, Field(strict=True, ge=1)] | None = Field(default=None,
        description=("Elastic floor: the fewest training tasks (chief included) an attempt may run with; "
                     "null: the job never runs smaller than the spec."))
    exclude_after_failures: Annotated[int, Field(strict=True, ge=1, le=100)] = Field(default=2,
        description="A host on which this many attempts in a row failed is left out.")
    readmit_after_s: _Seconds | None = Field(default=600.0,
        description=("A left-out host is probed again after this long, and used again once healthy; null: "
                     "never."))
    wait_for_hosts_s: Annotated[float, Field(strict=True, ge=0, le=7 * 86400,
                                             allow_inf_nan=False)] = Field(default=300.0,
        description="Too few usable hosts for `min_workers`: wait this long for hosts to return, probing.")
    spares: Annotated[int, Field(strict=True, ge=0, le=64)] = Field(default=0,
        description=("Slurm: nodes `tfcluster submit` allocates beyond those the tasks need (a listed pool's "
                     "spares are the hosts beyond what the tasks need)."))


class SlurmSection(BaseModel):
    """``slurm:`` in a spec: run on the Slurm allocation's nodes (``slurm: {}``). The fields are
    the old names of ``placement``'s (:data:`RENAMED`)."""

    model_config = _FROZEN

    tasks_per_node: _Count | None = Field(default=None,
        description="Old name of placement.tasks_per_host (still accepted, with a line saying so).")
    spare_nodes: Annotated[int, Field(strict=True, ge=0, le=64)] | None = Field(default=None,
        description="Old name of placement.spares (still accepted, with a line saying so).")
    port: Annotated[int, Field(strict=True, ge=1024, le=_MAX_PORT)] | None = Field(default=None,
        description="Old name of placement.port (still accepted, with a line saying so).")
    max_node_failures: Annotated[int, Field(strict=True, ge=1, le=100)] | None = Field(default=None,
        description="Old name of placement.exclude_after_failures (still accepted, with a line saying so).")


#: ``slurm.<old>`` -> ``placement.<new>``.
RENAMED = {"tasks_per_node": "tasks_per_host", "spare_nodes": "spares", "port": "port",
           "max_node_failures": "exclude_after_failures"}


def renamed_fields(slurm: SlurmSection | None) -> list[str]:
    """One line per old ``slurm:`` field the spec still uses, naming what replaces it."""
    if slurm is None:
        return []
    return [f"slurm.{old} is now placement.{new} (slurm.{old} still works)"
            for old, new in RENAMED.items() if getattr(slurm, old) is not None]


def effective_placement(placement: PlacementSpec | None,
                        slurm: SlurmSection | None) -> PlacementSpec | None:
    """The pool placement a spec asks for: ``placement``, or one made of ``slurm``'s old fields."""
    if placement is not None or slurm is None:
        return placement
    given = {new: getattr(slurm, old) for old, new in RENAMED.items()
             if getattr(slurm, old) is not None}
    # as before placement: existed, too few nodes end the run at once, to be requeued without them
    return PlacementSpec(**given, wait_for_hosts_s=0.0)


class PlacedTask(Protocol):
    """A ``tasks:`` entry as the placement rules read it."""

    @property
    def count(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int | None: ...


def hosts_needed(placement: PlacementSpec, tasks: int) -> int:
    """Hosts the tasks occupy at full size (the spares not counted)."""
    return -(-tasks // placement.tasks_per_host)


def placement_problems(placement: PlacementSpec | None, slurm: SlurmSection | None,
                       tasks: Sequence[PlacedTask], hosts: Sequence[str],
                       training: int) -> Iterator[tuple[str, str]]:
    """(field path, message) for each way the spec contradicts pool placement."""
    if placement is not None and slurm is not None and renamed_fields(slurm):
        yield ("slurm", "give these fields under placement only: "
               + ", ".join(f"slurm.{o} -> placement.{n}" for o, n in RENAMED.items()
                           if getattr(slurm, o) is not None))
    pool = effective_placement(placement, slurm)
    if pool is None:
        return
    section = "placement" if placement is not None else "slurm"
    if slurm is not None and pool.hosts is not None:
        yield ("placement.hosts", "must be omitted with slurm: the allocation's nodes are the pool")
    if slurm is None and pool.hosts is None:
        yield ("placement.hosts", "list the pool's hosts (or add 'slurm: {}' to place the tasks "
               "on a Slurm allocation's nodes)")
    if slurm is not None and hosts:
        yield ("hosts", "must be empty with slurm: the allocation's nodes are the hosts "
               "(remove hosts, or remove slurm to name the hosts yourself)")
    for position, task in enumerate(tasks):
        if task.host != DEFAULT_HOST:
            yield (f"tasks[{position}].host", f"must not be set with {section}: tasks are placed "
                   "on the pool's hosts (remove host)")
        if task.port is not None:
            yield (f"tasks[{position}].port", f"must not be set with {section}: ports are "
                   f"{section}.port, +1, ... in task order (set {section}.port instead)")
    total = sum(task.count for task in tasks)
    if pool.port + total - 1 > _MAX_PORT:
        yield (f"{section}.port", f"ports {pool.port}..{pool.port + total - 1} go past "
               f"{_MAX_PORT}: lower {section}.port")
    yield from _pool_problems(pool, total, training)


def _pool_problems(pool: PlacementSpec, total: int, training: int) -> Iterator[tuple[str, str]]:
    if pool.min_workers is not None and pool.min_workers > training:
        yield ("placement.min_workers", f"must be at most the {training} training task(s) "
               "(chief and workers) the spec has")
    if pool.hosts is None:
        return
    if len(set(pool.hosts)) != len(pool.hosts):
        yield ("placement.hosts", "lists a host twice: name each host once")
    if pool.spares:
        yield ("placement.spares", "is for Slurm allocations: a listed pool's spares are the hosts "
               "beyond what the tasks need (remove spares, or list more hosts)")
    need = hosts_needed(pool, total)
    if len(pool.hosts) < need:
        yield ("placement.hosts", f"{len(pool.hosts)} host(s) hold {len(pool.hosts)} x "
               f"{pool.tasks_per_host} task(s), but the spec has {total}: list {need} or more "
               "hosts, or raise placement.tasks_per_host")
