"""Which GPUs each task sees: ``CUDA_VISIBLE_DEVICES`` slices from the spec's ``resources``.

Pure, like the rest of the plan: the k-th task on a host (in task order) gets devices
``k*N .. k*N+N-1`` for ``resources.gpus_per_task: N``, so slices are disjoint on every host and the
same for every attempt (a warm spare, started with its task's ``CUDA_VISIBLE_DEVICES``, still fits
the next launch). Without ``gpus_per_task`` nothing is set: each task sees every GPU of its host.
"""

from __future__ import annotations

from launcher.spec.model import ClusterSpec
from worker.wire.tfconfig import TaskId

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def gpu_slices(spec: ClusterSpec) -> dict[TaskId, tuple[int, ...]]:
    """The device indices of every task, by task (empty without ``gpus_per_task``)."""
    per_task = spec.resources.gpus_per_task if spec.resources is not None else None
    if per_task is None:
        return {}
    placed: dict[str, int] = {}
    slices: dict[TaskId, tuple[int, ...]] = {}
    for slot in spec.task_slots():
        k = placed.get(slot.host, 0)
        placed[slot.host] = k + 1
        slices[slot.task] = tuple(range(k * per_task, (k + 1) * per_task))
    return slices


def device_env(slices: dict[TaskId, tuple[int, ...]], task: TaskId) -> dict[str, str]:
    """``{"CUDA_VISIBLE_DEVICES": "0,1"}`` for a task with a slice, else nothing."""
    devices = slices.get(task)
    if devices is None:
        return {}
    return {CUDA_VISIBLE_DEVICES: ",".join(str(d) for d in devices)}
