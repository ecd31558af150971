"""The Slurm allocation tfcluster runs in: its job id and nodes, in Slurm's own order.

The node list is expanded by ``scontrol show hostnames`` (Slurm's order: ``node9`` before
``node10``, unlike a string sort), and each node's address is its ``NodeAddr`` as
``scontrol show node`` reports it (the name itself where Slurm has none).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from launcher.backends.slurm.commands import SlurmError, slurm_command

JOB_ID = "SLURM_JOB_ID"
NODELIST = "SLURM_JOB_NODELIST"
RESTART_COUNT = "SLURM_RESTART_COUNT"


@dataclass(frozen=True)
class SlurmNode:
    """One node of the allocation: its Slurm name and the address its tasks are reached at."""

    name: str
    address: str


@dataclass(frozen=True)
class Allocation:
    job_id: str
    nodes: tuple[SlurmNode, ...]
    #: How often Slurm requeued this job (0 for its first run).
    restart_count: int


class NotInAllocation(SlurmError):
    def __init__(self) -> None:
        super().__init__(f"this spec places tasks on a Slurm allocation, but {JOB_ID} is not set: "
                         "run it inside salloc or an sbatch script, or use 'tfcluster submit'")


def expand_nodelist(nodelist: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """``n[1-3],gpu7`` -> ``["n1", "n2", "n3", "gpu7"]``, as Slurm orders them."""
    return slurm_command(["scontrol", "show", "hostnames", nodelist], environ=environ).split()


def node_addresses(names: Sequence[str],
                   environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each node's ``NodeAddr`` (one ``scontrol show node -o`` call for all of them)."""
    text = slurm_command(["scontrol", "show", "node", "-o", ",".join(names)], environ=environ)
    addresses: dict[str, str] = {}
    for line in text.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "NodeName" in fields:
            addresses[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return addresses


def read_allocation(environ: Mapping[str, str] | None = None) -> Allocation:
    """The allocation named by ``environ`` (default: this process's); :class:`NotInAllocation`
    outside one."""
    env = os.environ if environ is None else environ
    job_id = env.get(JOB_ID)
    nodelist = env.get(NODELIST)
    if not job_id or not nodelist:
        raise NotInAllocation()
    names = expand_nodelist(nodelist, env)
    addresses = node_addresses(names, env)
    try:
        restarts = int(env.get(RESTART_COUNT) or 0)
    except ValueError:
        restarts = 0
    return Allocation(job_id=job_id, nodes=tuple(SlurmNode(n, addresses.get(n, n)) for n in names),
                      restart_count=restarts)
