"""TensorFlow checkpoints for MultiWorkerMirroredStrategy custom training loops.

``TrainingCheckpoint`` wraps ``tf.train.Checkpoint`` + ``tf.train.CheckpointManager`` the way TF's
multi-worker docs prescribe and tfcluster expects (see docs/guides/training-script.md):

- every task calls :meth:`TrainingCheckpoint.save` with the same step, because saving may run
  collective ops under MWMS;
- the chief writes into ``TFCLUSTER_CHECKPOINT_DIR`` in the standard ``CheckpointManager`` layout
  (``checkpoint`` state file, ``ckpt-<step>.index``, ``ckpt-<step>.data-*``);
- every other task writes into its own ``workertemp_<index>`` directory and removes it right away;
- :meth:`TrainingCheckpoint.restore` prefers ``TFCLUSTER_RESUME_CHECKPOINT`` and falls back to the
  latest checkpoint in the chief's directory, so a run outside tfcluster resumes as well;
- :meth:`TrainingCheckpoint.preempted` makes a ``SIGTERM`` to any one task a graceful preemption:
  every task stops at the same step, saves it, and the script exits with
  ``worker.wire.env.PREEMPTION_EXIT_CODE`` (see :mod:`worker.preemption`)::

      for step in range(start + 1, steps + 1):
          train_step(iterator)
          worker.report(step)
          ckpt.maybe_save(step, every=50)
          if ckpt.preempted(step):          # every task, after every step
              sys.exit(PREEMPTION_EXIT_CODE)  # or: ckpt.exit_if_preempted(step)

TensorFlow is imported lazily: importing this module never loads TF.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from typing import TYPE_CHECKING, Any

from worker.preemption import PreemptionWatcher, catch_early
from worker.reporting import send as report_send
from worker.wire.env import PREEMPTION_EXIT_CODE
from worker.wire.reports import ReportKind
from worker.wire.tfconfig import EVALUATOR

if TYPE_CHECKING:
    import tensorflow as tf

    from worker.task_context import TaskContext

__all__ = ["TrainingCheckpoint"]

log = logging.getLogger(__name__)

# A script that imports this module is preemption-aware: a SIGTERM before its training loop's
# watcher exists (imports, set-up) is kept, and the loop stops at its first agreed step.
catch_early()

_MAX_ERROR = 2000


class TrainingCheckpoint:
    """Save and restore ``step`` plus the given trackables (model, optimizer, ...) under MWMS.

    ``step`` is a scalar integer ``tf.Variable`` holding the number of completed training steps;
    :meth:`save` assigns it, :meth:`restore` returns its restored value. The optimizer must have
    created its variables (``optimizer.build(model.trainable_variables)``) before :meth:`restore`:
    Keras 3 optimizers do not support TF's deferred restoration.

    ``strategy`` (the job's ``MultiWorkerMirroredStrategy``) is needed by :meth:`preempted` when
    the job has more than one task; ``preemption_check_every`` and ``preemption_timeout_s`` are
    :class:`~worker.preemption.PreemptionWatcher`'s ``every`` and ``timeout_s`` (None: adapt to
    the step time: the tasks agree on a notice about every quarter second of training).
    """

    def __init__(
        self, ctx: TaskContext, step: tf.Variable, max_to_keep: int = 3, *,
        strategy: Any | None = None, preemption_check_every: int | None = None,
        preemption_timeout_s: float | None = None, **trackables: Any
    ) -> None:
        import tensorflow as tf

        if "step" in trackables:
            raise ValueError("'step' is reserved for the step counter")
        self.ctx = ctx
        self.step = step
        self.max_to_keep = max_to_keep
        self.strategy = strategy
        self.checkpoint = tf.train.Checkpoint(step=step, **trackables)
        self._manager: tf.train.CheckpointManager | None = None
        self._saved_step: int | None = None
        lone = ctx.num_workers <= 1 or ctx.task_type == EVALUATOR  # no collectives to join
        self._watcher = PreemptionWatcher(None if lone else strategy,
                                          every=preemption_check_every,
                                          timeout_s=preemption_timeout_s)
        if strategy is not None and threading.current_thread() is threading.main_thread():
            self._watcher.install()  # from now on, not from the first step: nothing is missed
        #: The prefix restored by :meth:`restore`, if any.
        self.restored_from: str | None = None

    # -- restore ---------------------------------------------------------------------------------

    def latest(self) -> str | None:
        """What :meth:`restore` would load: the resume checkpoint, else the chief's latest."""
        if self.ctx.resume_checkpoint:
            return self.ctx.resume_checkpoint
        if self.ctx.chief_checkpoint_dir:
            import tensorflow as tf

            latest: str | None = tf.train.latest_checkpoint(self.ctx.chief_checkpoint_dir)
            return latest
        return None

    def restore(self) -> int:
        """Restore the latest checkpoint (every task, same one); return its step, 0 if none.

        A failed restore is reported to the agent (``restore_failed``) and then re-raised, so that
        tfcluster can fall back to an older checkpoint on the next attempt.
        """
        path = self.latest()
        if path is None:
            return 0
        try:
            self.checkpoint.restore(path).assert_existing_objects_matched()
        except Exception as exc:
            error = str(exc)[:_MAX_ERROR]  # keep the report line under PIPE_BUF
            report_send({"kind": ReportKind.RESTORE_FAILED.value, "checkpoint": path, "error": error})
            raise
        self.restored_from = path
        step = int(self.step.numpy())
        expected = self.ctx.resume_step
        if path == self.ctx.resume_checkpoint and expected is not None and expected != step:
            log.warning("checkpoint %s holds step %d, TFCLUSTER_RESUME_STEP says %d",
                        path, step, expected)
        return step

    # -- save ------------------------------------------------------------------------------------

    def save(self, step: int) -> str | None:
        """Save after ``step`` completed steps. Every task must call this, with the same ``step``.

        Returns the chief's checkpoint prefix on the chief, the (already removed) temporary prefix
        on other tasks, and None when no checkpoint directory is configured.
        """
        own_dir = self.ctx.checkpoint_dir
        if own_dir is None or self.ctx.task_type == EVALUATOR:
            return None
        self.step.assign(step)
        self._saved_step = step
        if self.ctx.is_chief:
            path: str = self._chief_manager(own_dir).save(checkpoint_number=step)
            return path
        import tensorflow as tf

        # A fresh manager each time: the directory is gone after every save, and a stale one left
        # by a killed attempt must not leak old state into this one.
        shutil.rmtree(own_dir, ignore_errors=True)
        os.makedirs(own_dir, exist_ok=True)
        manager = tf.train.CheckpointManager(self.checkpoint, directory=own_dir, max_to_keep=1)
        path = manager.save(checkpoint_number=step)
        shutil.rmtree(own_dir, ignore_errors=True)
        return path

    def maybe_save(self, step: int, every: int) -> str | None:
        """:meth:`save` if ``step`` is a positive multiple of ``every`` (``every <= 0``: never)."""
        if every <= 0 or step <= 0 or step % every:
            return None
        return self.save(step)

    # -- preemption ------------------------------------------------------------------------------

    def preempted(self, step: int) -> bool:
        """Call on every task after every step ``step`` (after ``worker.report(step)``).

        True, on every task at the same step, once any task of the job got ``SIGTERM``: the
        checkpoint at ``step`` is then saved (on every task, as :meth:`save` requires; the chief's
        is kept; not twice if :meth:`save` just did) and reported to tfcluster, and the caller
        should exit with ``worker.wire.env.PREEMPTION_EXIT_CODE`` at once. The first call installs the
        ``SIGTERM`` handler (replacing TF's), so call it from the main thread, after the strategy
        exists. Costs two local flag reads per step: tfcluster's coordinator picks the stop
        step and tells every task (see :mod:`worker.preemption`).
        """
        if self._watcher.strategy is None and self.ctx.num_workers > 1 \
                and self.ctx.task_type != EVALUATOR:
            raise ValueError("TrainingCheckpoint.preempted needs the job's strategy: pass "
                             "strategy=<your MultiWorkerMirroredStrategy> to TrainingCheckpoint")
        self._watcher.install()
        if not self._watcher.should_stop(step):
            return False
        if self._saved_step != step:
            self.save(step)
        report_send({"kind": ReportKind.PREEMPTED.value, "step": step})
        if self._saved_step == step:
            log.info("preempted: checkpoint saved at step %d on %s", step, self.ctx.task)
        else:  # no checkpoint directory: stop together all the same
            log.warning("preempted at step %d on %s without a checkpoint directory: nothing "
                        "saved", step, self.ctx.task)
        return True

    def exit_if_preempted(self, step: int) -> None:
        """:meth:`preempted`, then ``SystemExit(PREEMPTION_EXIT_CODE)`` if it is True."""
        if self.preempted(step):
            raise SystemExit(PREEMPTION_EXIT_CODE)

    def _chief_manager(self, directory: str) -> tf.train.CheckpointManager:
        if self._manager is None:
            import tensorflow as tf

            os.makedirs(directory, exist_ok=True)
            self._manager = tf.train.CheckpointManager(
                self.checkpoint, directory=directory, max_to_keep=self.max_to_keep
            )
        return self._manager
