"""A task that reports a preemption and exits 143 without saving, attempt after attempt, must not
restart forever outside the budget: the first few such preemptions in a row are free, each one after
them is counted, and the budget or crash-loop detection ends the job. The histories are built as
the coordinator builds them (each attempt judged after the ones before it)."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from launcher.job.failure_rules import judged, judged_history
from launcher.job.policy import Action, Decision, decide, restarts_used
from launcher.run.failures import FailureKind, TaskFailure
from launcher.run.outcome import FREE_UNSAVED_PREEMPTIONS, AttemptResult, AttemptStatus
from launcher.spec.health import RestartSpec

NOTICE = "worker:0 reported a preemption"


def attempt(kind: FailureKind, code: int, *, notice: str | None, progress: bool | None,
            step: int | None = None) -> AttemptResult:
    failure = TaskFailure(task="worker:0", host="localhost", attempt=0, kind=kind, died_at=10.0,
                          observed_at=10.01, exit_code=code)
    return AttemptResult(attempt=0, status=AttemptStatus.FAILED, started_at=0.0, ended_at=1.0,
                         failures=(failure,), made_progress=progress, checkpoint_step=step,
                         preemption_notice=notice)


def unsaved(progress: bool | None = False) -> AttemptResult:
    """A ``preempted`` report, then exit 143 with no newer checkpoint."""
    return attempt(FailureKind.PREEMPTED, 143, notice=NOTICE, progress=progress)


def saved() -> AttemptResult:
    return attempt(FailureKind.PREEMPTED, 143, notice=NOTICE, progress=True, step=400)


def bare_143() -> AttemptResult:
    return attempt(FailureKind.PREEMPTED, 143, notice=None, progress=False)


def crashed() -> AttemptResult:
    return attempt(FailureKind.EXITED, 1, notice=None, progress=False)


def decisions(attempts: list[AttemptResult], restart: RestartSpec) -> list[Decision]:
    """What the policy decides after each attempt, the history judged as the coordinator does."""
    history: list[AttemptResult] = []
    found = []
    for number, given in enumerate(attempts):
        result = AttemptResult(**{**given.__dict__, "attempt": number})
        history.append(judged(result, history, ()))
        found.append(decide(history, restart, ports_allocated=True))
    return found


R3 = RestartSpec(max_restarts=3, backoff_s=0.5)  # crash_loop_attempts: 3 (the default)
NO_LOOP_CHECK = RestartSpec(max_restarts=3, backoff_s=0.5, crash_loop_attempts=None)
N = FREE_UNSAVED_PREEMPTIONS


class Want(NamedTuple):
    action: Action
    counts: bool
    reason: str


CASES = [
    pytest.param([unsaved()] * N, R3, Want(Action.RESTART, False, "graceful preemption"),
                 id="the-first-unsaved-preemptions-are-free"),
    pytest.param([unsaved()] * (N + 1), R3,
                 Want(Action.RESTART, True, f"the last {N + 1} preemptions in a row saved no"),
                 id="the-next-one-is-counted"),
    pytest.param([unsaved()] * (N + 3), R3, Want(Action.FAIL, False, "crash loop"),
                 id="then-a-crash-loop-ends-it"),
    pytest.param([unsaved(progress=None)] * (N + 4), NO_LOOP_CHECK,
                 Want(Action.FAIL, False, "gave up after 3 restart(s)"),
                 id="without-checkpoints-the-budget-ends-it"),
    pytest.param([unsaved()] * N + [saved(), unsaved()], R3,
                 Want(Action.RESTART, False, "graceful preemption"),
                 id="a-saved-preemption-starts-the-count-again"),
    pytest.param([unsaved()] * N + [crashed(), unsaved()], R3,
                 Want(Action.RESTART, False, "graceful preemption"),
                 id="a-counted-failure-starts-the-count-again"),
    pytest.param([saved()] * (N + 5), R3, Want(Action.RESTART, False, "graceful preemption"),
                 id="saved-preemptions-are-never-counted"),
    pytest.param([bare_143()], R3, Want(Action.RESTART, True, "no new checkpoint"),
                 id="exit-143-without-a-notice-is-counted-at-once"),
]


@pytest.mark.parametrize(("attempts", "restart", "want"), CASES)
def test_unsaved_preemptions(attempts: list[AttemptResult], restart: RestartSpec,
                             want: Want) -> None:
    last = decisions(attempts, restart)[-1]
    assert (last.action, last.counts) == (want.action, want.counts), last.reason
    assert want.reason in last.reason


def test_an_endless_run_of_unsaved_preemptions_ends() -> None:
    found = decisions([unsaved()] * 50, R3)
    ends = [i for i, d in enumerate(found) if d.action is Action.FAIL]
    assert ends and ends[0] < N + R3.max_restarts + 1
    counted = [d.counts for d in found[:ends[0]]]
    assert counted == [False] * N + [True] * (ends[0] - N)


def test_a_resumed_run_reads_the_same_history_back() -> None:
    history: list[AttemptResult] = []
    for number in range(N + 2):
        result = AttemptResult(**{**unsaved().__dict__, "attempt": number})
        history.append(judged(result, history, ()))
    plain = [AttemptResult(**{**r.__dict__, "unsaved_preemptions_before": 0}) for r in history]
    again = judged_history(plain, ())
    assert [r.charged for r in again] == [r.charged for r in history] == \
        [False] * N + [True, True]
    assert restarts_used(again) == 2
    assert [r.to_dict()["counted_against_budget"] for r in again] == [r.charged for r in again]
