"""``summary.json``: the job's outcome and, per attempt, its root cause, steps lost and the time
it took to recover (from the root-cause task's death to the first step of the next attempt).

A script that never calls ``worker.report`` (an unchanged TF tutorial) reports no steps, so the
figures are derived where something else tells: a preemption that saved a newer checkpoint lost
nothing; when the next attempt reports no first step, the recovery time is counted to the moment
every one of its tasks had started (``recovery_from: "tasks_started"``, from ``events.jsonl``).
Otherwise they are null, and ``steps_lost_note`` says the steps lost are unknown and why.
:func:`restart_from` says, in the restart line, where the next attempt starts, and why it starts
from the beginning when it does.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from launcher.job.exports import export_summary
from launcher.job.failures import FailureKind
from launcher.job.outcome import AttemptResult
from launcher.output.events import EventType, read_events
from launcher.plan.planner import ResumePoint

#: Why the steps lost are unknown: nothing counted them.
NO_STEP_REPORTS = "unknown: the tasks report no steps (worker.report)"
#: TF's multi-worker tutorial writes the chief's checkpoints to a temp dir of its own.
CHECKPOINT_DIR_HINT = ("the chief must write its checkpoints to TFCLUSTER_CHECKPOINT_DIR (TF's "
                       "multi-worker tutorial writes them to a per-process temporary directory)")


def recovery(attempts: Sequence[AttemptResult], index: int,
             tasks_started: Mapping[int, float] | None = None) -> dict[str, Any]:
    """Steps lost and recovery time of the failure that ended ``attempts[index]``;
    ``tasks_started``: per attempt, when its last task started (epoch seconds)."""
    current = attempts[index]
    cause = current.root_cause
    following = attempts[index + 1] if index + 1 < len(attempts) else None
    if cause is None or following is None:
        return {"steps_lost": None, "recovery_s": None}
    resumed_at = following.resume_step or 0
    figures: dict[str, Any] = {"steps_lost": None}
    if current.max_step is not None:
        figures["steps_lost"] = max(0, current.max_step - resumed_at)
    elif cause.kind is FailureKind.PREEMPTED and current.made_progress:
        figures["steps_lost"] = 0  # it saved a newer checkpoint, then exited: nothing lost
    elif current.checkpoint_step is not None:
        figures["steps_lost_note"] = (f"{NO_STEP_REPORTS}; what came after checkpoint step "
                                      f"{current.checkpoint_step} was lost")
    else:
        figures["steps_lost_note"] = NO_STEP_REPORTS
    back = following.first_progress_at
    if back is None and (started := (tasks_started or {}).get(following.attempt)) is not None:
        back = started
        figures["recovery_from"] = "tasks_started"  # not a first step: the tasks report none
    figures["recovery_s"] = None if back is None else round(back - cause.died_at, 3)
    return figures


def tasks_started(run_dir: str) -> dict[int, float]:
    """Per attempt, when its last task started, from the run's ``events.jsonl`` (empty if it
    cannot be read)."""
    started: dict[int, float] = {}
    try:
        events = read_events(Path(run_dir) / "events.jsonl")
    except (OSError, ValueError):
        return started
    for event in events:
        if event.get("event") == EventType.TASK_STARTED.value:
            attempt, ts = event.get("attempt"), event.get("ts")
            if isinstance(attempt, int) and isinstance(ts, int | float):
                started[attempt] = max(started.get(attempt, ts), ts)
    return started


def restart_from(resume: ResumePoint | None, checkpoint_dir: str | None,
                 history: Sequence[AttemptResult]) -> str:
    """Where the next attempt starts, for the restart line: a step, or the beginning and why."""
    if resume is not None:
        return f"step {resume.step}"
    if checkpoint_dir is None:
        return "the beginning (the spec has no checkpoint.dir)"
    if any(attempt.checkpoint_step is not None for attempt in history):
        return f"the beginning (no usable checkpoint in {checkpoint_dir})"
    return (f"the beginning: no checkpoint was ever written to {checkpoint_dir} "
            f"(checkpoint.dir); {CHECKPOINT_DIR_HINT}")


def job_summary(*, job: str, status: str, exit_code: int, reason: str,
                attempts: Sequence[AttemptResult], run_dir: str, started: float
                ) -> dict[str, Any]:
    cause = next((a.root_cause for a in reversed(attempts) if a.root_cause), None)
    started_at = tasks_started(run_dir)
    ended = time.time()
    return {
        "job": job,
        "status": status,
        "exit_code": exit_code,
        "reason": reason,
        "run_dir": run_dir,
        "started_at": started,
        "ended_at": ended,
        "duration_s": round(ended - started, 3),
        "restarts": max(0, len(attempts) - 1),
        "root_cause": None if cause is None or status == "succeeded" else cause.to_dict(),
        "attempts": [{**a.to_dict(), **recovery(attempts, i, started_at)}
                     for i, a in enumerate(attempts)],
        **export_summary(run_dir),  # the models the chief saved (worker.save_model)
    }
