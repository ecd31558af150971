"""The single-task restart policy of a parameter_server job, as tables: who is started again,
which budget it spends, when a worker is left out, and when the job is given up."""

from __future__ import annotations

import pytest

from launcher.job.task_policy import TaskAction, TaskDecision, TaskTally, decide_task, quick
from launcher.spec.health import RestartSpec
from worker.wire.tfconfig import TaskId

CHIEF, PS0 = TaskId("chief", 0), TaskId("ps", 0)
W0, W1, EVAL = TaskId("worker", 0), TaskId("worker", 1), TaskId("evaluator", 0)
WORKERS = (W0, W1)
SPEC = RestartSpec(max_restarts=2, max_task_restarts=3, backoff_s=1.0, backoff_max_s=8.0,
                   task_crash_loop=3, task_crash_window_s=10.0)


def decide(task: TaskId, uptime_s: float = 60.0, tallies: dict[TaskId, TaskTally] | None = None,
           *, used: int = 0, preempted: bool = False, spec: RestartSpec = SPEC) -> TaskDecision:
    return decide_task(task, uptime_s, preempted=preempted, tallies=tallies or {},
                       workers=WORKERS, restart=spec, job_restarts_used=used)


@pytest.mark.parametrize(("task", "restarted", "budget"), [
    (W1, (W1,), "task"),          # a worker alone: the chief trains on
    (EVAL, (EVAL,), "task"),      # the evaluator alone
    (PS0, (PS0, CHIEF), "job"),   # a ps with the chief, which resumes from its checkpoint
    (CHIEF, (CHIEF,), "job"),     # the chief alone, the servers stay up
])
def test_who_is_started_again(task: TaskId, restarted: tuple[TaskId, ...], budget: str) -> None:
    decision = decide(task)
    assert (decision.action, decision.restart, decision.budget) == \
        (TaskAction.RESTART, restarted, budget)


def test_the_reason_says_who_and_which_restart() -> None:
    assert decide(W1).reason == ("restarting it alone in 1.0s (task restart 1 of 3); the chief "
                                 "trains on")
    assert decide(PS0, used=1).reason == ("restarting it and the chief in 1.0s (restart 2 of 2); "
                                          "the workers stay up")


@pytest.mark.parametrize(("tallies", "action", "words"), [
    ({W0: TaskTally(restarts=2), W1: TaskTally(restarts=0)}, TaskAction.RESTART, "restart 3 of 3"),
    ({W0: TaskTally(restarts=2), EVAL: TaskTally(restarts=1)}, TaskAction.FAIL,
     "gave up after 3 single-task restart(s) (restart.max_task_restarts = 3)"),
    # the chief's restarts do not spend the task budget
    ({CHIEF: TaskTally(restarts=5), PS0: TaskTally(restarts=5)}, TaskAction.RESTART, "1 of 3"),
])
def test_task_budget(tallies: dict[TaskId, TaskTally], action: TaskAction, words: str) -> None:
    decision = decide(W1, tallies=tallies)
    assert decision.action is action and words in decision.reason


@pytest.mark.parametrize(("task", "used", "action", "words"), [
    (CHIEF, 1, TaskAction.RESTART, "restart 2 of 2"),
    (CHIEF, 2, TaskAction.FAIL, "gave up after 2 restart(s) (restart.max_restarts = 2)"),
    (PS0, 2, TaskAction.FAIL, "gave up after 2 restart(s)"),
])
def test_job_budget(task: TaskId, used: int, action: TaskAction, words: str) -> None:
    decision = decide(task, used=used)
    assert decision.action is action and words in decision.reason


def test_restarts_off() -> None:
    decision = decide(CHIEF, spec=RestartSpec(max_restarts=0))
    assert decision.action is TaskAction.FAIL and "restarts are off" in decision.reason


def test_a_preempted_chief_is_not_counted() -> None:
    decision = decide(CHIEF, used=2, preempted=True)
    assert (decision.action, decision.budget, decision.backoff_s) == (TaskAction.RESTART, None, 0)


@pytest.mark.parametrize(("uptime", "streak_before", "action"), [
    (5.0, 1, TaskAction.RESTART),      # second quick failure: not yet a loop
    (5.0, 2, TaskAction.LEAVE_OUT),    # third in a row: left out, the job goes on
    (60.0, 2, TaskAction.RESTART),     # it ran a while: the streak is broken
])
def test_crash_loop_of_a_worker(uptime: float, streak_before: int, action: TaskAction) -> None:
    decision = decide(W1, uptime, {W1: TaskTally(restarts=streak_before,
                                                 quick_failures=streak_before)})
    assert decision.action is action


def test_quick_failures_back_off_exponentially() -> None:
    waits = [decide(W1, 1.0, {W1: TaskTally(quick_failures=n)},
                    spec=RestartSpec(task_crash_loop=None, backoff_s=1.0,
                                     backoff_max_s=4.0)).backoff_s for n in range(4)]
    assert waits == [1.0, 2.0, 4.0, 4.0]
    assert decide(W1, 60.0, {W1: TaskTally(quick_failures=3)}).backoff_s == 1.0


def test_the_last_worker_in_a_crash_loop_ends_the_job() -> None:
    decision = decide(W1, 1.0, {W0: TaskTally(left_out=True), W1: TaskTally(quick_failures=2)})
    assert decision.action is TaskAction.FAIL
    assert "no other worker is left" in decision.reason


def test_a_chief_in_a_crash_loop_ends_the_job() -> None:
    decision = decide(CHIEF, 1.0, {CHIEF: TaskTally(quick_failures=2)})
    assert decision.action is TaskAction.FAIL and "crash loop" in decision.reason


def test_quick() -> None:
    assert quick(9.9, SPEC) and not quick(10.0, SPEC)
