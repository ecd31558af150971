"""The ``strategy`` field: which TensorFlow multi-worker strategy the job runs, and what each one
needs of the task groups.

- ``multi_worker_mirrored`` (the default): the chief and the workers all-reduce every step, so any
  failure restarts the whole job from the chief's checkpoint.
- ``parameter_server`` (inferred when a ``ps`` task exists): the chief runs the
  ``ClusterCoordinator`` program, workers and parameter servers run a TF server
  (``python -m worker.server`` unless their group names an entrypoint); tasks are restarted one
  at a time (:mod:`launcher.job.task_policy`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal, Protocol

from worker.wire.tfconfig import CHIEF, PS, WORKER

MULTI_WORKER_MIRRORED = "multi_worker_mirrored"
PARAMETER_SERVER = "parameter_server"
Strategy = Literal["multi_worker_mirrored", "parameter_server"]


class TaskGroup(Protocol):
    """A ``tasks:`` entry as these rules read it."""

    @property
    def type(self) -> str: ...


def strategy_in_force(strategy: str | None, groups: Sequence[TaskGroup]) -> str:
    """The strategy the job runs: the one given, else ``parameter_server`` when a ps task
    exists, else ``multi_worker_mirrored``."""
    if strategy is not None:
        return strategy
    return PARAMETER_SERVER if any(g.type == PS for g in groups) else MULTI_WORKER_MIRRORED


def strategy_problems(strategy: str | None, groups: Sequence[TaskGroup],
                      pooled: bool) -> Iterator[tuple[str, str]]:
    """(field path, message) for every task group the strategy cannot run; ``pooled``: the
    tasks are placed from a host pool (``placement`` or ``slurm``)."""
    kinds = {g.type for g in groups}
    if strategy_in_force(strategy, groups) == MULTI_WORKER_MIRRORED:
        for position, group in enumerate(groups):
            if group.type == PS:
                yield (f"tasks[{position}].type", "a ps task needs strategy: parameter_server "
                       "(a multi_worker_mirrored job all-reduces between its chief and workers "
                       "and has no parameter servers)")
        return
    if PS not in kinds:
        yield ("strategy", "a parameter_server job needs at least one parameter server: add "
               "a task group {type: ps}")
    if CHIEF not in kinds:
        yield ("tasks", "a parameter_server job needs a chief: it runs the entrypoint, "
               "TensorFlow's ClusterCoordinator program")
    if WORKER not in kinds:
        yield ("tasks", "a parameter_server job needs at least one worker: add a task group "
               "{type: worker}")
    if pooled:
        yield ("placement", "host pools place multi_worker_mirrored jobs only: in a "
               "parameter_server job, give each task group its host")
