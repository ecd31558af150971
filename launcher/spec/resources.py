"""GPUs in a spec: the ``resources:`` section and what it asks of each host.

By default (no ``resources``) tfcluster leaves ``CUDA_VISIBLE_DEVICES`` alone: the usual layout is
one task per machine that uses every GPU of it, with ``MirroredStrategy`` across them inside the
``MultiWorkerMirroredStrategy`` worker (MWMS does that by itself: its local replicas are the GPUs
the task sees). ``gpus_per_task: N`` instead gives each task of a host its own N GPUs: the k-th
task on a host (in task order) sees devices ``k*N .. k*N+N-1`` as ``CUDA_VISIBLE_DEVICES``, so
several tasks share one machine without sharing a device::

    resources:
      gpus_per_task: 2
      gpus_per_host: 8          # optional: what every host has (checked by validate and plan)
      hosts: {node-b: 4}        # optional: per host, overriding gpus_per_host

A host whose GPU count is declared must have enough for its tasks; pre-flight counts the GPUs
each host really has (``nvidia-smi``) and refuses a plan that needs more.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

#: More GPUs than any one machine has; a larger number is a typo.
MAX_GPUS = 1024

GpuCount = Annotated[int, Field(strict=True, ge=0, le=MAX_GPUS)]


class ResourcesSpec(BaseModel):
    """``resources:`` in a spec (see the module doc)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    gpus_per_task: Annotated[int, Field(strict=True, ge=1, le=MAX_GPUS)] | None = Field(default=None,
        description="GPUs each task gets to itself (its `CUDA_VISIBLE_DEVICES`); null: leave it alone.")
    gpus_per_host: GpuCount | None = Field(default=None,
        description="GPUs every host has, if known; null: not declared (pre-flight still counts them).")
    hosts: dict[str, GpuCount] = Field(
        default={}, description="GPUs of named hosts, overriding `gpus_per_host`.")

    def declared_gpus(self, host: str) -> int | None:
        """The GPUs the spec says ``host`` has, None if it does not say."""
        return self.hosts.get(host, self.gpus_per_host)


def tasks_per_host(task_hosts: Sequence[str]) -> dict[str, int]:
    """How many tasks each host runs (``task_hosts``: the host of every task), in order."""
    counts: dict[str, int] = {}
    for host in task_hosts:
        counts[host] = counts.get(host, 0) + 1
    return counts


def resource_problems(resources: ResourcesSpec, task_hosts: Sequence[str],
                      env: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """(field path, message) for each host that cannot hold what ``resources`` gives its tasks
    (``task_hosts``: the host of every task; ``env``: the spec's)."""
    counts = tasks_per_host(task_hosts)
    for host in resources.hosts:
        if host not in counts:
            yield (f"resources.hosts.{host}", f"{host!r} runs no task: name a host of 'tasks' "
                   f"({', '.join(sorted(counts))})")
    if resources.gpus_per_task is None:
        return
    if "CUDA_VISIBLE_DEVICES" in env:
        yield ("env.CUDA_VISIBLE_DEVICES", "is set per task by resources.gpus_per_task: remove "
               "one of the two")
    for host, tasks in counts.items():
        has = resources.declared_gpus(host)
        need = tasks * resources.gpus_per_task
        if has is not None and need > has:
            field = f"resources.hosts.{host}" if host in resources.hosts \
                else "resources.gpus_per_host"
            yield (field, f"host {host} has {has} GPU(s) but its {tasks} task(s) need {need} "
                   f"({resources.gpus_per_task} each): lower gpus_per_task or move tasks")
