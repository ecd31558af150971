"""``summary.json``: per attempt, the steps its failure cost and how long the job took to recover."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from launcher.run.failures import FailureKind, TaskFailure
from launcher.run.outcome import AttemptResult, AttemptStatus
from launcher.run.summary import job_summary, recovery


def failure(task: str, died_at: float, attempt: int, kind: FailureKind = FailureKind.EXITED,
            exit_code: int | None = 1) -> TaskFailure:
    return TaskFailure(task=task, host="node-a", attempt=attempt, kind=kind, died_at=died_at,
                       observed_at=died_at + 0.01, exit_code=exit_code)


def attempt(number: int, *failures: TaskFailure, resume_step: int | None = None,
            max_step: int | None = None, first_progress_at: float | None = None,
            status: AttemptStatus | None = None) -> AttemptResult:
    if status is None:
        status = AttemptStatus.FAILED if failures else AttemptStatus.SUCCEEDED
    return AttemptResult(attempt=number, status=status, started_at=10.0 * number,
                         ended_at=10.0 * number + 9.0, failures=failures, resume_step=resume_step,
                         max_step=max_step, first_progress_at=first_progress_at)


def history() -> list[AttemptResult]:
    """worker:1 dies at step 100 (checkpoint 80), then the chief at 150 (checkpoint 140), then ok."""
    return [
        attempt(0, failure("worker:1", 5.0, 0), failure("chief:0", 5.5, 0, exit_code=None,
                                                        kind=FailureKind.SIGNALLED),
                max_step=100, first_progress_at=1.0),
        attempt(1, failure("chief:0", 15.25, 1), resume_step=80, max_step=150,
                first_progress_at=12.0),
        attempt(2, resume_step=140, max_step=200, first_progress_at=21.5),
    ]


@pytest.mark.parametrize(("index", "expected"), [
    (0, {"steps_lost": 20, "recovery_s": 7.0}),  # from the root cause's death (5.0) to 12.0
    (1, {"steps_lost": 10, "recovery_s": 6.25}),
    (2, {"steps_lost": None, "recovery_s": None}),  # the last attempt: nothing follows
])
def test_recovery_per_attempt(index: int, expected: dict[str, Any]) -> None:
    assert recovery(history(), index) == expected


@pytest.mark.parametrize(("max_step", "resume_step", "lost"), [
    (100, 80, 20),
    (100, None, 100),  # no checkpoint: everything is done again
    (100, 100, 0),
    (50, 80, 0),  # never negative
    (None, 80, None),  # the failed attempt reported no step
])
def test_steps_lost(max_step: int | None, resume_step: int | None, lost: int | None) -> None:
    attempts = [attempt(0, failure("worker:0", 5.0, 0), max_step=max_step),
                attempt(1, resume_step=resume_step, first_progress_at=8.0)]
    assert recovery(attempts, 0)["steps_lost"] == lost


def test_no_recovery_time_when_the_next_attempt_never_stepped() -> None:
    attempts = [attempt(0, failure("worker:0", 5.0, 0), max_step=10),
                attempt(1, failure("worker:0", 12.0, 1), resume_step=5)]
    assert recovery(attempts, 0) == {"steps_lost": 5, "recovery_s": None}


def test_an_attempt_without_a_failure_has_no_recovery() -> None:
    attempts = [attempt(0, status=AttemptStatus.INTERRUPTED, max_step=10),
                attempt(1, resume_step=5, first_progress_at=12.0)]
    assert recovery(attempts, 0) == {"steps_lost": None, "recovery_s": None}


def summary(status: str, attempts: list[AttemptResult], exit_code: int = 0) -> dict[str, Any]:
    return job_summary(job="digits", status=status, exit_code=exit_code, reason="because",
                       attempts=attempts, run_dir="/runs/digits-1", started=time.time() - 2.0)


def test_a_job_that_succeeded_after_restarts() -> None:
    result = summary("succeeded", history())
    assert result["root_cause"] is None
    assert (result["job"], result["status"], result["exit_code"], result["reason"]) == (
        "digits", "succeeded", 0, "because")
    assert result["restarts"] == 2
    assert result["run_dir"] == "/runs/digits-1"
    assert result["duration_s"] == pytest.approx(2.0, abs=0.5)
    assert [(a["attempt"], a["status"], a["steps_lost"], a["recovery_s"])
            for a in result["attempts"]] == [
        (0, "failed", 20, 7.0), (1, "failed", 10, 6.25), (2, "succeeded", None, None)]
    assert [a["root_cause"] and a["root_cause"]["task"] for a in result["attempts"]] == [
        "worker:1", "chief:0", None]
    json.dumps(result)  # summary.json


def test_a_job_that_failed_names_the_last_attempts_root_cause() -> None:
    attempts = history()[:2]
    result = summary("failed", attempts, exit_code=1)
    assert result["root_cause"] is not None
    assert (result["root_cause"]["task"], result["root_cause"]["attempt"],
            result["root_cause"]["kind"]) == ("chief:0", 1, "exited")
    assert result["restarts"] == 1
    assert [a["steps_lost"] for a in result["attempts"]] == [20, None]
    assert [a["recovery_s"] for a in result["attempts"]] == [7.0, None]
    json.dumps(result)


def test_the_root_cause_is_the_first_failure_not_the_first_listed() -> None:
    late, early = failure("chief:0", 9.0, 0), failure("worker:2", 4.0, 0)
    result = summary("failed", [attempt(0, late, early, max_step=3)], exit_code=1)
    assert result["root_cause"]["task"] == "worker:2"
    assert result["restarts"] == 0
    assert [f["task"] for f in result["attempts"][0]["failures"]] == ["worker:2", "chief:0"]
