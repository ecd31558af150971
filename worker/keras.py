"""Keras ``model.fit`` under tfcluster: progress reports and restartable backups (tf_keras).

Keras 3 ``fit`` does not work under MultiWorkerMirroredStrategy on TF 2.21, so this is for tf_keras
(``tfcluster[tf-gpu]``, or beside tensorflow-cpu ``pip install --no-deps tf_keras==<TF's x.y>.*``;
run with ``TF_USE_LEGACY_KERAS=1`` so that ``tf.keras`` is tf_keras too)::

    from worker.keras import callbacks
    model.fit(dataset, epochs=10, steps_per_epoch=100, callbacks=callbacks())

:func:`callbacks` gives every task

- a callback that reports every batch to tfcluster (``worker.report(step, loss=..., ...)``) with the
  global step ``epoch * steps_per_epoch + batch + 1``, which drives hang detection and the run's
  ``task_progress`` events, and logs the epoch the task starts from; at the end of each epoch it
  reports ``fit``'s epoch logs too, as ``epoch_<name>`` (``epoch_loss``, ``epoch_val_accuracy``...,
  as Keras' own TensorBoard callback names them). tfcluster keeps them in ``RUN_DIR/metrics.jsonl``
  and ``RUN_DIR/tensorboard/<task>/``;
- ``tf_keras.callbacks.BackupAndRestore`` on the chief's checkpoint directory
  (``TFCLUSTER_CHECKPOINT_DIR``), so that a restarted attempt resumes from the last backup. Keras
  lays it out as ``<dir>/chief/`` (kept; tfcluster's checkpoint discovery reads it) and
  ``<dir>/workertemp_<i>/`` (non-chief copies, removed after each save and by tfcluster). Backups
  are numbered by the optimizer's step (``ckpt-<step>``, not Keras's save counter), so tfcluster's
  ``checkpoint_found`` step, ``TFCLUSTER_RESUME_STEP`` and ``steps_lost`` are training steps, and
  they are kept when ``fit`` ends, like the final checkpoint of a custom loop.

TensorFlow and tf_keras are imported lazily: importing this module loads neither.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import worker
from worker.task_context import TaskContext

__all__ = ["backup_and_restore", "callbacks", "progress_callback"]

_classes: dict[str, type] = {}


def callbacks(ctx: TaskContext | None = None, *, backup_dir: str | None = None,
              save_freq: str | int = "epoch", report_every: int = 1) -> list[Any]:
    """The callbacks a tfcluster ``fit`` needs: progress reports, and backups when the job has a
    checkpoint directory (``backup_dir`` overrides it). ``save_freq``: ``"epoch"`` or every N
    batches, as for ``BackupAndRestore``."""
    ctx = ctx or worker.context()
    directory = backup_dir or ctx.chief_checkpoint_dir
    found: list[Any] = [progress_callback(ctx, every=report_every)]
    if directory:
        found.append(backup_and_restore(directory, save_freq=save_freq))
    return found


def progress_callback(ctx: TaskContext | None = None, *, every: int = 1) -> Any:
    """A callback reporting the global step and the batch's metrics every ``every`` batches."""
    return _progress_class()(ctx or worker.context(), every)


def backup_and_restore(backup_dir: str, *, save_freq: str | int = "epoch") -> Any:
    """``tf_keras.callbacks.BackupAndRestore`` numbering its backups by training step and keeping
    them after ``fit`` (``delete_checkpoint=False``)."""
    return _backup_class()(backup_dir, save_freq=save_freq, delete_checkpoint=False)


def _scalar_metrics(logs: dict[str, Any] | None) -> dict[str, float]:
    metrics = {}
    for name, value in (logs or {}).items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            metrics[name] = number
    return metrics


def _progress_class() -> type:
    if "progress" in _classes:
        return _classes["progress"]
    import tf_keras

    class ReportProgress(tf_keras.callbacks.Callback):  # type: ignore[misc]
        """``worker.report`` every ``every`` batches with the global step."""

        def __init__(self, ctx: TaskContext, every: int) -> None:
            super().__init__()
            if every < 1:
                raise ValueError(f"every must be >= 1, not {every}")
            self.ctx = ctx
            self.every = every
            self.epoch = 0
            #: The epoch this ``fit`` began with (> 0 when BackupAndRestore resumed it).
            self.first_epoch: int | None = None
            self.last_step: int | None = None

        def _step(self, batch: int) -> int:
            steps = (self.params or {}).get("steps")
            if steps:
                return int(self.epoch * steps + batch + 1)
            return int(self.model.optimizer.iterations.numpy())

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.epoch = epoch
            if self.first_epoch is None:
                self.first_epoch = epoch
                print(f"[keras {self.ctx.task}] training from epoch {epoch} "
                      f"(step {self._step(-1)})", file=sys.stderr, flush=True)

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            step = self._step(batch)
            self.last_step = step
            if step % self.every == 0:
                worker.report(step, **_scalar_metrics(logs))

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            metrics = {f"epoch_{name}": value for name, value in _scalar_metrics(logs).items()}
            if metrics and self.last_step is not None:
                worker.report(self.last_step, epoch=epoch, **metrics)

    _classes["progress"] = ReportProgress
    return ReportProgress


def _backup_class() -> type:
    if "backup" in _classes:
        return _classes["backup"]
    import tensorflow as tf
    import tf_keras

    class StepBackupAndRestore(tf_keras.callbacks.BackupAndRestore):  # type: ignore[misc]
        """BackupAndRestore whose checkpoints are ``ckpt-<optimizer step>``."""

        def _backup(self, epoch: int, batch: int = 0) -> None:
            state = getattr(self, "_training_state", None)
            manager = getattr(state, "write_checkpoint_manager", None)
            optimizer = getattr(self.model, "optimizer", None)
            iterations = getattr(optimizer, "iterations", None)
            if manager is None or iterations is None:  # a tf_keras we do not know: its own way
                super()._backup(epoch, batch)
                return
            # Every task saves (MWMS); non-chief tasks write a temporary copy and remove it.
            saved = manager.save(checkpoint_number=int(iterations.numpy()))
            chief = manager is getattr(state, "read_checkpoint_manager", None)
            if saved and not chief and tf.io.gfile.exists(manager.directory):
                tf.io.gfile.rmtree(manager.directory)

    _classes["backup"] = StepBackupAndRestore
    return StepBackupAndRestore
