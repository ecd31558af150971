"""Issue 7 A: an exit with the preemption code restarts outside the budget only when tfcluster can
vouch for the preemption (a newer checkpoint, or a preemption notice it saw); otherwise it is a
failure like any other, and every restart backs off. A table of histories -> decisions, as in
tests/unit/job/test_policy.py, plus the preemption notices the coordinator reads from the events."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from launcher.job.policy import Action, decide, preemption_backoff, restarts_used
from launcher.job.preemption_notices import PreemptionNotices
from launcher.run.events import FaultInjected, TaskPreempted, TaskProgress
from launcher.run.failures import FailureKind, TaskFailure
from launcher.run.outcome import AttemptResult, AttemptStatus
from launcher.spec.health import RestartSpec


def exit_code_failure(code: int, kind: FailureKind = FailureKind.PREEMPTED) -> TaskFailure:
    return TaskFailure(task="worker:0", host="localhost", attempt=0, kind=kind, died_at=10.0,
                       observed_at=10.01, exit_code=code)


def attempt(*, code: int = 143, made_progress: bool | None = None,
            checkpoint_step: int | None = None, notice: str | None = None,
            kind: FailureKind = FailureKind.PREEMPTED) -> AttemptResult:
    return AttemptResult(attempt=0, status=AttemptStatus.FAILED, started_at=0.0, ended_at=1.0,
                         failures=(exit_code_failure(code, kind),), made_progress=made_progress,
                         checkpoint_step=checkpoint_step, preemption_notice=notice)


def bare_143() -> AttemptResult:
    """``python3 -c "import sys; sys.exit(143)"``: no checkpoint dir, no notice."""
    return attempt()


def stuck_143(step: int | None = 300) -> AttemptResult:
    """Exit 143 in a job with checkpoints, but none newer than the one it resumed from."""
    return attempt(made_progress=False, checkpoint_step=step)


def saved_143() -> AttemptResult:
    """Exit 143 after the chief saved a newer checkpoint (step 400)."""
    return attempt(made_progress=True, checkpoint_step=400)


def noticed_143(step: int | None = None, made_progress: bool | None = None) -> AttemptResult:
    """Exit 143 after worker:1 reported its preemption through the worker helpers."""
    return attempt(notice="worker:1 reported a preemption", checkpoint_step=step,
                   made_progress=made_progress)


def crash() -> AttemptResult:
    return attempt(code=1, kind=FailureKind.EXITED)


def renumber(history: list[AttemptResult]) -> list[AttemptResult]:
    return [AttemptResult(**{**r.__dict__, "attempt": i}) for i, r in enumerate(history)]


R1 = RestartSpec(max_restarts=1, backoff_s=1.0, backoff_max_s=30.0)
R3 = RestartSpec(max_restarts=3, backoff_s=1.0, backoff_max_s=30.0)
R0 = RestartSpec(max_restarts=0, backoff_s=2.0)
NO_LOOP_CHECK = RestartSpec(max_restarts=5, backoff_s=1.0, crash_loop_attempts=None)


class Want(NamedTuple):
    action: Action
    backoff_s: float
    counts: bool
    reason: str  # a fragment of Decision.reason


COUNTED = "exit 143 but no new checkpoint: counted as a failure"

DECISIONS = [
    # (history, restart spec, Want(action, backoff, counts, reason))
    # --- not justified: counted, backed off, and said so
    pytest.param([bare_143()], R1, Want(Action.RESTART, 1.0, True, f"{COUNTED} (restart 1 of 1)"),
                 id="bare-143-is-counted"),
    pytest.param([bare_143(), bare_143()], R1,
                 Want(Action.FAIL, 0.0, False, f"{COUNTED}; gave up after 1 restart(s)"),
                 id="bare-143-ends-after-max-restarts-plus-one-attempts"),
    pytest.param([bare_143()], R0, Want(Action.FAIL, 0.0, False, f"{COUNTED}; a task failed and "
                 "restarts are off"), id="bare-143-with-restarts-off"),
    pytest.param([bare_143(), bare_143()], R3,
                 Want(Action.RESTART, 2.0, True, f"{COUNTED} (restart 2 of 3)"),
                 id="bare-143-backs-off-exponentially"),
    pytest.param([attempt(code=42)], R3,
                 Want(Action.RESTART, 1.0, True, "exit 42 but no new checkpoint: counted"),
                 id="bare-42-is-counted"),
    pytest.param([stuck_143()], R3, Want(Action.RESTART, 1.0, True, f"{COUNTED} (restart 1 of 3)"),
                 id="143-without-a-newer-checkpoint-is-counted"),
    pytest.param([stuck_143()] * 3, R3,
                 Want(Action.FAIL, 0.0, False, f"{COUNTED}; crash loop: 3 attempts"),
                 id="counted-143s-make-a-crash-loop"),
    pytest.param([crash(), bare_143()], R3,
                 Want(Action.RESTART, 2.0, True, f"{COUNTED} (restart 2 of 3)"),
                 id="bare-143-after-a-crash"),
    # --- justified by a newer checkpoint: outside the budget
    pytest.param([saved_143()], R3, Want(Action.RESTART, 0.0, False,
                 "resuming from the checkpoint it saved (step 400"), id="saved-143"),
    pytest.param([saved_143()], R0, Want(Action.RESTART, 0.0, False, "not counted"),
                 id="saved-143-with-restarts-off"),
    pytest.param([crash(), crash(), crash(), crash(), saved_143()], NO_LOOP_CHECK,
                 Want(Action.RESTART, 0.0, False, "checkpoint it saved"),
                 id="saved-143-after-budget-spent"),
    # --- justified by a preemption notice tfcluster saw
    pytest.param([noticed_143()], R1, Want(Action.RESTART, 0.0, False,
                 "(worker:1 reported a preemption): restarting from the beginning (no checkpoint)"),
                 id="noticed-143-without-checkpoints"),
    pytest.param([noticed_143(step=300, made_progress=False)], R1,
                 Want(Action.RESTART, 0.0, False, "from the last checkpoint (step 300), as the "
                      "attempt saved no newer one"),
                 id="noticed-143-with-an-older-checkpoint"),
    pytest.param([attempt(notice="the drill sent SIGTERM to worker:0")], R0,
                 Want(Action.RESTART, 0.0, False, "the drill sent SIGTERM to worker:0"),
                 id="143-after-a-drill-term"),
    # --- every uncounted restart after the first in a row backs off too
    pytest.param([saved_143(), saved_143()], R3,
                 Want(Action.RESTART, 1.0, False, "checkpoint it saved"),
                 id="second-preemption-in-a-row-backs-off"),
    pytest.param([saved_143(), noticed_143(), saved_143()], R3,
                 Want(Action.RESTART, 1.0, False, "checkpoint it saved"),
                 id="third-preemption-in-a-row-backs-off"),
    pytest.param([saved_143(), crash(), saved_143()], R3,
                 Want(Action.RESTART, 0.0, False, "checkpoint it saved"),
                 id="a-crash-ends-the-run-of-preemptions"),
    # --- a justified preemption breaks no rule of the budget
    pytest.param([saved_143(), noticed_143(), crash()], R1,
                 Want(Action.RESTART, 1.0, True, "restart 1 of 1"),
                 id="justified-preemptions-are-not-charged"),
]


@pytest.mark.parametrize(("history", "restart", "want"), DECISIONS)
def test_decide_on_preemption_exits(history: list[AttemptResult], restart: RestartSpec,
                                    want: Want) -> None:
    decision = decide(renumber(history), restart, ports_allocated=True)
    assert decision.action is want.action
    assert decision.backoff_s == pytest.approx(want.backoff_s)
    assert decision.counts is want.counts
    assert want.reason in decision.reason


@pytest.mark.parametrize("result", [bare_143(), stuck_143(), noticed_143(),
                                    noticed_143(step=300, made_progress=False)],
                         ids=["bare", "stuck", "noticed", "noticed-older-checkpoint"])
def test_no_reason_claims_a_checkpoint_that_was_not_saved(result: AttemptResult) -> None:
    decision = decide(renumber([result]), R3, ports_allocated=True)
    assert "checkpoint it saved" not in decision.reason


@pytest.mark.parametrize("max_restarts", [0, 1, 3])
def test_exit_143_with_nothing_saved_ends_after_max_restarts_plus_one_attempts(
        max_restarts: int) -> None:
    """The reported bug: 131 attempts in 20 s. Now: max_restarts + 1 attempts, each restart
    backed off."""
    restart = RestartSpec(max_restarts=max_restarts, backoff_s=0.5, backoff_max_s=10.0)
    history: list[AttemptResult] = []
    waits: list[float] = []
    while len(history) < 100:
        history.append(bare_143())
        decision = decide(renumber(history), restart, ports_allocated=True)
        if decision.action is Action.FAIL:
            break
        assert decision.counts
        waits.append(decision.backoff_s)
    assert len(history) == max_restarts + 1
    assert all(wait > 0 for wait in waits)


def test_restarts_used_counts_unjustified_preemptions_only() -> None:
    assert restarts_used([bare_143(), stuck_143(), saved_143(), noticed_143(), crash()]) == 3


def test_justification_of_an_attempt() -> None:
    assert not bare_143().preemption_justified and bare_143().charged
    assert not stuck_143().preemption_justified
    assert saved_143().preemption_justified and not saved_143().charged
    assert noticed_143().preemption_justified and not noticed_143().charged
    assert not crash().preemption_justified  # not a preemption exit at all
    assert attempt(notice="x", kind=FailureKind.EXITED, code=1).charged


def test_preemption_backoff_is_none_first_then_the_base_backoff() -> None:
    spec = RestartSpec(max_restarts=3, backoff_s=4.0, backoff_max_s=30.0)
    assert preemption_backoff([saved_143()], spec) == 0.0
    assert preemption_backoff([saved_143(), saved_143()], spec) == 4.0
    assert preemption_backoff([saved_143()] * 5, spec) == 4.0  # never more than the base
    assert preemption_backoff([bare_143(), saved_143()], spec) == 0.0


def test_summary_records_the_notice_and_whether_the_attempt_was_counted() -> None:
    data = noticed_143().to_dict()
    assert data["preemption_notice"] == "worker:1 reported a preemption"
    assert data["counted_against_budget"] is False
    assert bare_143().to_dict()["counted_against_budget"] is True


# --- the preemption notices the coordinator reads from the job's events -------------------------


def test_notices_are_a_task_report_or_a_term_tfcluster_sent() -> None:
    notices = PreemptionNotices()
    notices.observe(TaskProgress(0, task="worker:0", step=3, metrics={}, first=True))
    notices.observe(FaultInjected(0, task="worker:1", host="localhost", signal="SIGKILL", step=3))
    assert notices.of(0) is None  # a SIGKILL is no notice
    notices.observe(FaultInjected(1, task="worker:1", host="localhost", signal="SIGTERM", step=3))
    notices.observe(TaskPreempted(2, task="chief:0", step=7))
    notices.observe(TaskPreempted(2, task="worker:0", step=7))
    assert notices.of(0) is None
    assert notices.of(1) == "the drill sent SIGTERM to worker:1"
    assert notices.of(2) == "chief:0 reported a preemption"  # the first one
    assert notices.of(3) is None
