"""The TF_CONFIG model shared by the coordinator (which writes it) and the tasks (which read it).

TensorFlow's ``TF_CONFIG`` is a JSON object ``{"cluster": {type: [host:port, ...]}, "task": {"type":
..., "index": ...}}``. Every task of one job carries the *same* ``cluster``; only ``task`` differs. An
evaluator is not part of ``cluster`` (it does not take part in the collective ops) but still receives
the cluster so that it can find the chief's checkpoints, which is what TensorFlow expects.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

CHIEF = "chief"
WORKER = "worker"
PS = "ps"
EVALUATOR = "evaluator"
TASK_TYPES = (CHIEF, WORKER, PS, EVALUATOR)
#: Task types that train: the MWMS collective ops, or a ParameterServerStrategy's chief and workers.
TRAINING_TYPES = (CHIEF, WORKER)
#: Task types in TF_CONFIG's ``cluster``, in its order (the evaluator runs outside the cluster).
CLUSTER_TYPES = (CHIEF, WORKER, PS)


def task_order(task: TaskId) -> tuple[int, int]:
    """How tasks are listed everywhere: chief, workers, parameter servers, evaluator, each by
    index."""
    return TASK_TYPES.index(task.type) if task.type in TASK_TYPES else len(TASK_TYPES), task.index


def checkpoint_writer(tasks: Iterable[TaskId]) -> TaskId | None:
    """The task that writes checkpoints, as TensorFlow decides: the chief, else worker 0."""
    present = set(tasks)
    for candidate in (TaskId(CHIEF, 0), TaskId(WORKER, 0)):
        if candidate in present:
            return candidate
    return None


class TFConfigError(ValueError):
    """TF_CONFIG is missing a field or does not describe a task of its own cluster."""


@dataclass(frozen=True, order=True)
class TaskId:
    """One task of a job, written ``type:index`` (``worker:1``) everywhere a person reads it."""

    type: str
    index: int

    def __str__(self) -> str:
        return f"{self.type}:{self.index}"

    @classmethod
    def parse(cls, text: str) -> TaskId:
        kind, sep, index = text.partition(":")
        if not sep or kind not in TASK_TYPES or not (index.isascii() and index.isdigit()):
            raise TFConfigError(f"not a task id: {text!r} (expected e.g. 'worker:1')")
        return cls(kind, int(index))

    @property
    def file_stem(self) -> str:
        """Name used for per-task files: ``worker-1``."""
        return f"{self.type}-{self.index}"


@dataclass(frozen=True)
class TFConfig:
    """A parsed TF_CONFIG: the training cluster and this task."""

    cluster: Mapping[str, tuple[str, ...]]
    task: TaskId

    def __post_init__(self) -> None:
        if self.task.type in CLUSTER_TYPES:
            members = self.cluster.get(self.task.type, ())
            if self.task.index >= len(members):
                raise TFConfigError(
                    f"task {self.task} is not in the cluster ({len(members)} {self.task.type} task(s))"
                )

    @property
    def chief(self) -> TaskId:
        """The task that writes checkpoints: ``chief:0``, else ``worker:0`` as TensorFlow decides."""
        return TaskId(CHIEF, 0) if self.cluster.get(CHIEF) else TaskId(WORKER, 0)

    @property
    def is_chief(self) -> bool:
        return self.task == self.chief

    @property
    def num_workers(self) -> int:
        """Number of tasks that train together (chief and workers, not the evaluator)."""
        return sum(len(self.cluster.get(kind, ())) for kind in TRAINING_TYPES)

    def address(self, task: TaskId) -> str:
        return self.cluster[task.type][task.index]

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": {kind: list(addrs) for kind, addrs in self.cluster.items()},
            "task": {"type": self.task.type, "index": self.task.index},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TFConfig:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TFConfigError(f"TF_CONFIG is not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise TFConfigError("TF_CONFIG must be a JSON object")
        cluster = raw.get("cluster")
        task = raw.get("task")
        if not isinstance(cluster, dict) or not isinstance(task, dict):
            raise TFConfigError("TF_CONFIG needs a 'cluster' object and a 'task' object")
        kind, index = task.get("type"), task.get("index")
        if not isinstance(kind, str) or isinstance(index, bool) or not isinstance(index, int) \
                or index < 0:
            raise TFConfigError("TF_CONFIG task needs a string 'type' and an integer 'index' >= 0")
        for members in cluster.values():
            if not isinstance(members, list) or not all(isinstance(a, str) for a in members):
                raise TFConfigError("every TF_CONFIG cluster entry must be a list of 'host:port'")
        parsed = {str(k): tuple(v) for k, v in cluster.items()}
        return cls(cluster=parsed, task=TaskId(kind, index))


def build_cluster(addresses: Mapping[TaskId, str]) -> dict[str, tuple[str, ...]]:
    """The ``cluster`` part of TF_CONFIG from the address of every task that serves one (chief,
    workers, parameter servers). Evaluators are left out, as TensorFlow expects; indices of each
    type must run 0..n-1.
    """
    cluster: dict[str, tuple[str, ...]] = {}
    for kind in CLUSTER_TYPES:
        members = sorted((t.index, addr) for t, addr in addresses.items() if t.type == kind)
        if [i for i, _ in members] != list(range(len(members))):
            raise TFConfigError(f"{kind} indices must be 0..{len(members) - 1}")
        if members:
            cluster[kind] = tuple(addr for _, addr in members)
    return cluster
