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
    num_workers: int
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
    def task_type(self) -> str:
        return self.task.type

    @property
    def task_index(self) -> int:
        return self.task.index


def worker_temp_dir(chief_dir: str, task: TaskId) -> str:
    """Non-chief checkpoint directory, laid out as Keras ``BackupAndRestore`` does (an
    evaluator, which trains nothing, gets one of its own so it never touches a worker's)."""
    if task.type == EVALUATOR:
        return os.path.join(chief_dir, f"workertemp_evaluator_{task.index}")
    return os.path.join(chief_dir, f"workertemp_{task.index}")


def context(environ: Mapping[str, str] | None = None) -> TaskContext:
    """Describe this task from the environment; harmless (a lone chief) outside tfcluster."""
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
    resume_step = environ.get(env.RESUME_STEP)
    return TaskContext(
        job=environ.get(env.JOB, "local"),
        task=task,
        is_chief=is_chief,
        num_workers=num_workers,
        attempt=int(environ.get(env.ATTEMPT, "0") or 0),
        chief_checkpoint_dir=chief_dir,
        checkpoint_dir=own_dir,
        resume_checkpoint=environ.get(env.RESUME_CHECKPOINT) or None,
        resume_step=int(resume_step) if resume_step else None,
        run_dir=environ.get(env.RUN_DIR) or None,
        under_tfcluster=env.TASK in environ,
    )
