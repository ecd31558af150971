"""Rebuilding a run's attempts from ``events.jsonl`` for ``--resume``: how each attempt ended,
whether it used up a restart, and the number the next attempt gets (a table of event logs)."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.job.policy import restarts_used
from launcher.job.resume import attempts_from_events
from launcher.run.failures import FailureKind, TaskFailure
from launcher.run.outcome import AttemptStatus

Event = dict[str, Any]


def started(ts: float = 1.0) -> Event:
    return {"ts": ts, "event": "job_started", "job": "j"}


def attempt(n: int, ts: float, resume_step: int | None = None) -> Event:
    return {"ts": ts, "event": "attempt_started", "attempt": n, "resume_step": resume_step,
            "resume_checkpoint": None if resume_step is None else f"/c/ckpt-{resume_step}",
            "ports": {"worker:0": 1234}}


def progress(n: int, ts: float, step: int) -> Event:
    return {"ts": ts, "event": "task_progress", "attempt": n, "task": "worker:0", "step": step,
            "metrics": {}, "first": False}


def failed(n: int, ts: float, kind: FailureKind = FailureKind.EXITED,
           code: int | None = 1) -> Event:
    failure = TaskFailure(task="worker:0", host="localhost", attempt=n, kind=kind, died_at=ts,
                          observed_at=ts + 0.01, exit_code=code, stderr_tail=("boom",))
    return {"ts": ts, "event": "task_failed", **failure.to_dict()}


def found(n: int, ts: float, step: int) -> Event:
    return {"ts": ts, "event": "checkpoint_found", "attempt": n, "step": step,
            "checkpoint": f"/c/ckpt-{step}"}


def restarting(next_attempt: int, ts: float, counts: bool) -> Event:
    return {"ts": ts, "event": "job_restarting", "attempt": next_attempt, "reason": "r",
            "backoff_s": 0.1, "counts_against_budget": counts}


def job_failed(ts: float, reason: str) -> Event:
    return {"ts": ts, "event": "job_failed", "job": "j", "reason": reason, "exit_code": 1}


CASES: dict[str, tuple[list[Event], list[tuple[AttemptStatus, bool]], int, str]] = {
    "lost while attempt 0 ran": (
        [started(), attempt(0, 2), progress(0, 3, 5)],
        [(AttemptStatus.INTERRUPTED, False)], 1, "lost"),
    "a counted restart, then lost": (
        [started(), attempt(0, 2), failed(0, 3), found(0, 4, 10), restarting(1, 5, True),
         attempt(1, 6, 10), progress(1, 7, 11)],
        [(AttemptStatus.FAILED, True), (AttemptStatus.INTERRUPTED, False)], 2, "lost"),
    "a preemption restart stays uncounted": (
        [started(), attempt(0, 2), failed(0, 3, FailureKind.PREEMPTED, 143),
         restarting(1, 5, False), attempt(1, 6)],
        [(AttemptStatus.FAILED, False), (AttemptStatus.INTERRUPTED, False)], 2, "lost"),
    "a port clash retry stays uncounted": (
        [started(), attempt(0, 2), failed(0, 3, FailureKind.PORT_CONFLICT),
         restarting(1, 5, False), attempt(1, 6)],
        [(AttemptStatus.FAILED, False), (AttemptStatus.INTERRUPTED, False)], 2, "lost"),
    "lost during the backoff: the announced attempt comes next": (
        [started(), attempt(0, 2), failed(0, 3), restarting(1, 5, True)],
        [(AttemptStatus.FAILED, True)], 1, "lost"),
    "stopped by SIGINT": (
        [started(), attempt(0, 2), job_failed(3, "tfcluster was stopped by SIGINT")],
        [(AttemptStatus.INTERRUPTED, False)], 1, "stopped"),
    "stopped during the backoff": (
        [started(), attempt(0, 2), failed(0, 3), restarting(1, 4, True),
         job_failed(5, "tfcluster was stopped by SIGTERM")],
        [(AttemptStatus.FAILED, True)], 1, "stopped"),
    "resumed once already, then lost again": (
        [started(), attempt(0, 2), started(10), {"ts": 11, "event": "job_resumed", "attempt": 1},
         attempt(1, 12), progress(1, 13, 3)],
        [(AttemptStatus.INTERRUPTED, False), (AttemptStatus.INTERRUPTED, False)], 2, "lost"),
    "failed on its own": (
        [started(), attempt(0, 2), failed(0, 3), job_failed(4, "gave up after 0 restart(s)")],
        [(AttemptStatus.FAILED, True)], 1, "failed"),
    "succeeded": (
        [started(), attempt(0, 2), {"ts": 3, "event": "job_succeeded", "job": "j"}],
        [(AttemptStatus.SUCCEEDED, False)], 1, "succeeded"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_attempts_are_rebuilt(case: str) -> None:
    events, expected, next_attempt, ended = CASES[case]
    past = attempts_from_events(events, has_checkpoints=True)
    assert [(a.status, a.charged) for a in past.attempts] == expected
    assert [a.attempt for a in past.attempts] == list(range(len(expected)))
    assert (past.next_attempt, past.ended) == (next_attempt, ended)
    assert past.started_at == 1.0


def test_what_an_attempt_recorded_is_kept() -> None:
    past = attempts_from_events(
        [started(), attempt(0, 2), progress(0, 3, 4), progress(0, 4, 9), failed(0, 5),
         found(0, 6, 5), restarting(1, 7, True), attempt(1, 8, 5), progress(1, 9, 6)],
        has_checkpoints=True)
    first, second = past.attempts
    assert (first.max_step, first.first_progress_at, first.checkpoint_step) == (9, 3, 5)
    assert first.made_progress is True and first.ports == {"worker:0": 1234}
    assert first.root_cause is not None and first.root_cause.stderr_tail == ("boom",)
    assert (first.started_at, first.ended_at) == (2, 7)
    assert second.resume_step == 5 and second.ended_at == 9
    assert past.resume_from is not None
    assert (past.resume_from.checkpoint, past.resume_from.step) == ("/c/ckpt-5", 5)
    assert restarts_used(past.attempts) == 1


def test_a_run_that_died_before_its_first_attempt() -> None:
    past = attempts_from_events([started()], has_checkpoints=False)
    assert (past.attempts, past.next_attempt, past.ended, past.resume_from) == ((), 0, "lost",
                                                                                None)


def test_a_checkpoint_that_failed_to_restore_is_not_handed_out_again() -> None:
    past = attempts_from_events(
        [started(), attempt(0, 2), failed(0, 3), found(0, 4, 20), restarting(1, 5, True),
         attempt(1, 6, 20), failed(1, 7, FailureKind.RESTORE_FAILED)],
        has_checkpoints=True)
    assert [a.bad_checkpoints for a in past.attempts] == [frozenset(), {"/c/ckpt-20"}]
