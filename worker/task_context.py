"""What a training script needs to know about its place in the job: ``worker.context()``.

Everything comes from the environment tfcluster sets (TF_CONFIG and the ``TFCLUSTER_*`` variables),
so the same script runs unchanged outside tfcluster, where it is a single chief at attempt 0.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from worker.wire import env
from worker.wire.tfconfig import CHIEF, EVALUATOR, TaskId, TFConfig


@dataclass(frozen=True)
class TaskContext:
    """This task's identity in the job and where it should write checkpoints."""

    job: str
    task: TaskId
    is_chief: bool
    #: Training tasks (chief and workers, not the evaluator) in *this* attempt: TF_CONFIG's count,
    #: which ``TFCLUSTER_NUM_WORKERS`` repeats. An elastic job may run with fewer than it asks for.
    num_workers: int
    #: Training tasks the spec asks for (``TFCLUSTER_MAX_WORKERS``; ``num_workers`` when unset).
    max_workers: int
    attempt: int
    #: The chief's checkpoint directory (``TFCLUSTER_CHECKPOINT_DIR``), the same for every task.
    chief_checkpoint_dir: str | None
    #: Where *this* task saves: the chief's directory for the chief, a ``workertemp_<index>``
    #: directory inside it for every other task (TensorFlow's multi-worker convention; the task
    #: removes it after saving and tfcluster removes leftovers between attempts).
    checkpoint_dir: str | None
    #: Checkpoint prefix to restore on a restart (``TFCLUSTER_RESUME_CHECKPOINT``), if any.
    resume_checkpoint: str | None
    resume_step: int | None
    run_dir: str | None
    under_tfcluster: bool

    @property
    def resized(self) -> bool:
        """This attempt runs with another number of training tasks than the spec asks for."""
        return self.num_workers != self.max_workers

    @property
    def task_type(self) -> str:
        return self.task.type

    @property
    def task_index(self) -> int:
        return self.task.index


class WorkerCountError(ValueError):
    """``TFCLUSTER_NUM_WORKERS`` or ``TFCLUSTER_MAX_WORKERS`` contradicts TF_CONFIG or each other."""

    def __init__(self, variable: str, value: str, problem: str) -> None:
        super().__init__(f"{variable}={value!r} {problem}")
        self.variable = variable
        self.value = value
        self.problem = problem


def worker_counts(environ: Mapping[str, str], tf_config_count: int) -> tuple[int, int]:
    """``(num_workers, max_workers)`` of this attempt. ``num_workers`` is TF_CONFIG's count (what
    MWMS runs with); ``TFCLUSTER_NUM_WORKERS``, when set, must say the same. ``max_workers`` is
    ``TFCLUSTER_MAX_WORKERS``, at least ``num_workers``, and ``num_workers`` when unset."""
    said = environ.get(env.NUM_WORKERS) or None
    if said is not None and _count(env.NUM_WORKERS, said) != tf_config_count:
        raise WorkerCountError(env.NUM_WORKERS, said,
                               f"but TF_CONFIG's cluster has {tf_config_count} training task(s)")
    raw_max = environ.get(env.MAX_WORKERS) or None
    if raw_max is None:
        return tf_config_count, tf_config_count
    max_workers = _count(env.MAX_WORKERS, raw_max)
    if max_workers < tf_config_count:
        raise WorkerCountError(env.MAX_WORKERS, raw_max,
                               f"is less than this attempt's {tf_config_count} training task(s)")
    return tf_config_count, max_workers


def _count(variable: str, value: str) -> int:
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise WorkerCountError(variable, value, "is not a count of training tasks (an integer >= 1)")
    return int(value)


def worker_temp_dir(chief_dir: str, task: TaskId) -> str:
    """Non-chief checkpoint directory, laid out as Keras ``BackupAndRestore`` does (an
    evaluator, which trains nothing, gets one of its own so it never touches a worker's)."""
    if task.type == EVALUATOR:
        return os.path.join(chief_dir, f"workertemp_evaluator_{task.index}")
    return os.path.join(chief_dir, f"workertemp_{task.index}")


def context(environ: Mapping[str, str] | None = None) -> TaskContext:
    """Describe this task from the environment; harmless (a lone chief) outside tfcluster.

    Raises :class:`WorkerCountError` when the worker-count variables contradict TF_CONFIG."""
    environ = os.environ if environ is None else environ
    raw = environ.get(env.TF_CONFIG)
    if raw:
        config = TFConfig.from_json(raw)
        task, is_chief, num_workers = config.task, config.is_chief, config.num_workers
    else:
        task, is_chief, num_workers = TaskId(CHIEF, 0), True, 1
    chief_dir = environ.get(env.CHECKPOINT_DIR) or None
    if chief_dir is None:
        own_dir = None
    elif is_chief:
        own_dir = chief_dir
    else:
        own_dir = worker_temp_dir(chief_dir, task)
    num_workers, max_workers = worker_counts(environ, num_workers)
    resume_step = environ.get(env.RESUME_STEP)
    return TaskContext(
        job=environ.get(env.JOB, "local"),
        task=task,
        is_chief=is_chief,
        num_workers=num_workers,
        max_workers=max_workers,
        attempt=int(environ.get(env.ATTEMPT, "0") or 0),
        chief_checkpoint_dir=chief_dir,
        checkpoint_dir=own_dir,
        resume_checkpoint=environ.get(env.RESUME_CHECKPOINT) or None,
        resume_step=int(resume_step) if resume_step else None,
        run_dir=environ.get(env.RUN_DIR) or None,
        under_tfcluster=env.TASK in environ,
    )
