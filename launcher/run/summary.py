"""``summary.json``: the job's outcome and, per attempt, its root cause, steps lost and the time
it took to recover (from the root-cause task's death to the first step of the next attempt).

A script that never calls ``worker.report`` (an unchanged TF tutorial) reports no steps, so the
figures are derived where something else tells: a preemption that saved a newer checkpoint lost
nothing; when the next attempt reports no first step, the recovery time is counted to the moment
every one of its tasks had started (``recovery_from: "tasks_started"``, from ``events.jsonl``).
Otherwise they are null, and ``steps_lost_note`` says the steps lost are unknown and why.
(:mod:`launcher.run.restart_line` says, in the restart line, where the next attempt starts.)

It also lists the models the chief exported (``worker.save_model``,
``worker.saving.model_checkpoint``): ``exports``, every ``model_exported`` event in order, and
``export``, the last (the job's final model), read back from ``events.jsonl`` so that a resumed run
(``run --resume``) keeps them too.

:func:`job_summary` builds the whole file, with the sections others add (per-task health, the
engine's own part) beside tfcluster's; :meth:`launcher.run.directory.RunDir.write_summary` is
the one writer of ``summary.json``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from launcher.run.directory import EVENTS_FILE
from launcher.run.event_log import read_logged
from launcher.run.events import Logged, ModelExported, TaskStarted
from launcher.run.failures import FailureKind
from launcher.run.outcome import AttemptResult
from launcher.run.step_figures import steps_lost

#: Why the steps lost are unknown: nothing counted them.
NO_STEP_REPORTS = "unknown: the tasks report no steps (worker.report)"


def recovery(attempts: Sequence[AttemptResult], index: int,
             tasks_started: Mapping[int, float] | None = None) -> dict[str, Any]:
    """Steps lost and recovery time of the failure that ended ``attempts[index]``;
    ``tasks_started``: per attempt, when its last task started (epoch seconds)."""
    current = attempts[index]
    cause = current.root_cause
    following = attempts[index + 1] if index + 1 < len(attempts) else None
    if cause is None or following is None:
        return {"steps_lost": None, "recovery_s": None}
    # the steps it reached beyond the next one's checkpoint, as every view counts them
    reached = current.max_step if current.reached_step is None else current.reached_step
    figures: dict[str, Any] = {"steps_lost": steps_lost(reached, following.resume_step)}
    if current.max_step is None and cause.kind is FailureKind.PREEMPTED and current.made_progress:
        figures["steps_lost"] = 0  # it saved a newer checkpoint, then exited: nothing lost
    elif current.max_step is None:  # nothing counted them
        figures["steps_lost_note"] = NO_STEP_REPORTS if current.checkpoint_step is None else (
            f"{NO_STEP_REPORTS}; what came after checkpoint step {current.checkpoint_step} "
            "was lost")
    back = following.first_progress_at
    if back is None and (started := (tasks_started or {}).get(following.attempt)) is not None:
        back = started
        figures["recovery_from"] = "tasks_started"  # not a first step: the tasks report none
    figures["recovery_s"] = None if back is None else round(back - cause.died_at, 3)
    return figures


def _events(run_dir: str) -> list[Logged]:
    """The run's events the summary reads (none if they cannot be read; a torn line is
    skipped)."""
    try:
        return read_logged(Path(run_dir) / EVENTS_FILE, torn_ok=True,
                           only=(TaskStarted, ModelExported))
    except OSError:
        return []


def tasks_started(run_dir: str, events: Sequence[Logged] | None = None) -> dict[int, float]:
    """Per attempt, when its last task started, from the run's ``events.jsonl``."""
    started: dict[int, float] = {}
    for logged in _events(run_dir) if events is None else events:
        if isinstance(logged.event, TaskStarted):
            attempt = logged.event.attempt
            started[attempt] = max(started.get(attempt, logged.ts), logged.ts)
    return started


def export_summary(run_dir: str, events: Sequence[Logged] | None = None) -> dict[str, Any]:
    """``exports`` (every ``model_exported`` event of the run, in order) and ``export`` (the
    last: the job's final model) for ``summary.json``, from the run's ``events.jsonl``."""
    records = [logged.event.record() for logged in (_events(run_dir) if events is None else events)
               if isinstance(logged.event, ModelExported)]
    return {"exports": records, "export": records[-1] if records else None}


def job_summary(*, job: str, status: str, exit_code: int, reason: str,
                attempts: Sequence[AttemptResult], run_dir: str, started: float,
                sections: Mapping[str, object] | None = None) -> dict[str, Any]:
    """What ``summary.json`` holds. ``sections``: top-level parts others add (e.g. ``health``
    and ``metrics`` from the health watch, an engine's from its session); one that would
    replace a part of tfcluster's own raises ValueError."""
    cause = next((a.root_cause for a in reversed(attempts) if a.root_cause), None)
    events = _events(run_dir)
    started_at = tasks_started(run_dir, events)
    ended = time.time()
    summary = {
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
        **export_summary(run_dir, events),  # the models the chief saved (worker.save_model)
    }
    clash = sorted(set(sections or {}) & set(summary))
    if clash:
        raise ValueError(f"summary.json: a section may not replace {', '.join(clash)}")
    return {**summary, **(sections or {})}
