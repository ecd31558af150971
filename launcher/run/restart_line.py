"""Where the next attempt starts, as the restart line says it (:func:`restart_from`): a step, or
the beginning and why, saying no more than tfcluster knows.

tfcluster knows of a checkpoint only in the chief's checkpoint dir. Without one it cannot say the
job starts from the beginning: a script that keeps checkpoints of its own (Keras
``BackupAndRestore`` in a directory it chose) resumes from them by itself. The hint about where
the chief must write is said once per run (not at every turn of a crash loop), and only after an
attempt whose tasks got to run: one that could not start or bind its port (:data:`NOT_RUN`)
never got to write anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from launcher.plan.planner import ResumePoint
from launcher.run.failures import FailureKind
from launcher.run.outcome import AttemptResult

#: TF's multi-worker tutorial writes the chief's checkpoints to a temp dir of its own.
CHECKPOINT_DIR_HINT = ("the chief must write its checkpoints to TFCLUSTER_CHECKPOINT_DIR (TF's "
                       "multi-worker tutorial writes them to a per-process temporary directory)")
#: Where an attempt starts when tfcluster knows of no checkpoint to hand it.
NO_CHECKPOINT = "the beginning as far as tfcluster knows"
#: Root causes of an attempt whose tasks never got to run their training.
NOT_RUN = frozenset({FailureKind.SPAWN_FAILED, FailureKind.PORT_CONFLICT,
                     FailureKind.STARTUP_TIMEOUT})


def ran(attempt: AttemptResult) -> bool:
    """Whether ``attempt``'s tasks got to run (its root cause is not one of :data:`NOT_RUN`)."""
    cause = attempt.root_cause
    return cause is not None and cause.kind not in NOT_RUN


def restart_from(resume: ResumePoint | None, checkpoint_dir: str | None,
                 history: Sequence[AttemptResult]) -> str:
    """Where the next attempt starts, for the restart line, ``history`` ending with the attempt
    that just ended: a step, or :data:`NO_CHECKPOINT` and why."""
    if resume is not None:
        return f"step {resume.step}"
    if checkpoint_dir is None:
        return (f"{NO_CHECKPOINT} (it was given no checkpoint.dir; a script that restores "
                "checkpoints of its own resumes from them by itself)")
    if any(attempt.checkpoint_step is not None for attempt in history):
        return f"{NO_CHECKPOINT} (no usable checkpoint in {checkpoint_dir})"
    said = f"{NO_CHECKPOINT}: no checkpoint was ever written to {checkpoint_dir} (checkpoint.dir)"
    if history and ran(history[-1]) and not any(ran(a) for a in history[:-1]):
        return f"{said}; {CHECKPOINT_DIR_HINT}"
    return said
