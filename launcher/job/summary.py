"""``summary.json``: the job's outcome and, per attempt, its root cause, steps lost and the time
it took to recover (from the root-cause task's death to the first step of the next attempt)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from launcher.job.outcome import AttemptResult


def recovery(attempts: Sequence[AttemptResult], index: int) -> dict[str, Any]:
    """Steps lost and recovery time of the failure that ended ``attempts[index]``."""
    current = attempts[index]
    cause = current.root_cause
    following = attempts[index + 1] if index + 1 < len(attempts) else None
    if cause is None or following is None:
        return {"steps_lost": None, "recovery_s": None}
    resumed_at = following.resume_step or 0
    lost = None if current.max_step is None else max(0, current.max_step - resumed_at)
    back = following.first_progress_at
    return {"steps_lost": lost,
            "recovery_s": None if back is None else round(back - cause.died_at, 3)}


def job_summary(*, job: str, status: str, exit_code: int, reason: str,
                attempts: Sequence[AttemptResult], run_dir: str, started: float
                ) -> dict[str, Any]:
    cause = next((a.root_cause for a in reversed(attempts) if a.root_cause), None)
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
        "attempts": [{**a.to_dict(), **recovery(attempts, i)} for i, a in enumerate(attempts)],
    }
