"""What the policies do with a failure rule (tables), and the job loop carrying it out in
simulated time: fail at once without backoff, restart outside the budget, leave a pool host out
(or say why a named host cannot be)."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from launcher.cli.start import planner_for
from launcher.job.coordinator import Coordinator, JobResult
from launcher.job.failure_rules import judged_history
from launcher.job.policy import Action, decide, restarts_used
from launcher.job.seams import LoopSeams
from launcher.job.state import JobState
from launcher.job.task_policy import TaskAction, TaskTally, decide_task
from launcher.output.console import Console
from launcher.plan.ports import PortAllocator
from launcher.run.directory import RunDir
from launcher.run.event_log import read_events
from launcher.run.failures import FailureKind, TaskFailure
from launcher.run.outcome import AppliedRule, AttemptResult, AttemptStatus
from launcher.spec.failure_rules import RuleAction
from launcher.spec.health import RestartSpec
from launcher.spec.loading import spec_from_dict
from tests.support.fake_backend import FakeBackend, FakeWorld, SimClock, SimInbox, TaskScript, run_inline
from worker.wire.tfconfig import TaskId

MODULE_TRACEBACK = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'x'\n"


def failed(code: int | None = 1, *, kind: FailureKind = FailureKind.EXITED,
           **fields: Any) -> AttemptResult:
    cause = TaskFailure(task="worker:1", host="h2", attempt=0, kind=kind, died_at=10.0,
                        observed_at=10.01, exit_code=code,
                        traceback=fields.pop("traceback", None))
    return AttemptResult(attempt=0, status=AttemptStatus.FAILED, started_at=0.0, ended_at=1.0,
                         failures=(cause,), **fields)


def spec(*rules: dict[str, Any], **restart: Any) -> RestartSpec:
    return RestartSpec.model_validate({"max_restarts": 3, "backoff_s": 1.0, "backoff_max_s": 30.0,
                                       "rules": list(rules), **restart})


UNCOUNTED_75 = {"match": {"exit_codes": [75]}, "action": "restart_uncounted"}
COUNTED_3 = {"match": {"exit_codes": [3]}, "action": "restart"}
FAIL_3 = {"match": {"exit_codes": [3]}, "action": "fail"}
LEAVE_75 = {**UNCOUNTED_75, "exclude_host": True}
PREEMPTED_COUNTED = {"match": {"exit_codes": [143]}, "action": "restart"}
R = spec()
START_UP = failed(traceback=MODULE_TRACEBACK)
E75, E3, E78 = failed(75), failed(3), failed(78)
SAVED_143 = failed(143, kind=FailureKind.PREEMPTED, made_progress=True, checkpoint_step=40)


class Want(NamedTuple):
    action: Action
    backoff_s: float
    counts: bool
    reason: str  # a fragment of Decision.reason


DECISIONS = [
    # (history, restart spec, pooled, Want)
    pytest.param([START_UP], spec(max_restarts=5), False,
                 Want(Action.FAIL, 0.0, False, "ModuleNotFoundError (No module named 'x') at "
                      "start-up (attempt 0, before any step): retrying cannot fix it"),
                 id="start-up-error-fails-at-once"),
    pytest.param([failed(1), START_UP], spec(max_restarts=5), False,
                 Want(Action.RESTART, 2.0, True, "restart 2 of 5"),
                 id="start-up-error-in-a-later-attempt-is-retried"),
    pytest.param([E78], spec(max_restarts=5), False,
                 Want(Action.FAIL, 0.0, False, "asks not to be restarted"), id="do-not-restart"),
    pytest.param([E3], spec(FAIL_3), False,
                 Want(Action.FAIL, 0.0, False, "restart.rules[0] (exit 3): fail, not restarted"),
                 id="rule-fail"),
    pytest.param([E75], spec(UNCOUNTED_75, max_restarts=0), False,
                 Want(Action.RESTART, 0.0, False, "restart.rules[0] (exit 75): restart, not "
                      "counted against restart.max_restarts"), id="uncounted-first-at-once"),
    pytest.param([E75, E75], spec(UNCOUNTED_75, max_restarts=0), False,
                 Want(Action.RESTART, 1.0, False, "not counted"), id="uncounted-second-backs-off"),
    pytest.param([E75, E75, E75], spec(UNCOUNTED_75, max_restarts=0), False,
                 Want(Action.RESTART, 2.0, False, "not counted"), id="uncounted-exponential"),
    pytest.param([E3], spec(COUNTED_3), False,
                 Want(Action.RESTART, 1.0, True, "restart.rules[0] (exit 3) (restart 1 of 3)"),
                 id="rule-restart-counted"),
    pytest.param([E75, E75, E3], spec(UNCOUNTED_75, COUNTED_3), False,
                 Want(Action.RESTART, 1.0, True, "(restart 1 of 3)"),
                 id="uncounted-restarts-spend-nothing"),
    pytest.param([E3] * 4, spec(COUNTED_3, crash_loop_attempts=None), False,
                 Want(Action.FAIL, 0.0, False, "restart.rules[0] (exit 3); gave up after 3 "
                      "restart(s)"), id="rule-restart-budget-spent"),
    pytest.param([SAVED_143], spec(PREEMPTED_COUNTED), False,
                 Want(Action.RESTART, 1.0, True, "restart.rules[0] (exit 143) (restart 1 of 3)"),
                 id="rule-counts-a-preemption"),
    pytest.param([SAVED_143], R, False, Want(Action.RESTART, 0.0, False, "graceful preemption"),
                 id="without-rules-a-preemption-is-free"),
    pytest.param([E75], spec(LEAVE_75), True,
                 Want(Action.RESTART, 0.0, False, "; its host h2 is left out of the next attempt"),
                 id="exclude-host-from-a-pool"),
    pytest.param([E75], spec(LEAVE_75), False,
                 Want(Action.RESTART, 0.0, False, "its host h2 cannot be left out: the spec "
                      "names each task's host"), id="exclude-host-named-hosts"),
]


@pytest.mark.parametrize(("history", "restart", "pooled", "want"), DECISIONS)
def test_decisions_with_rules(history: list[AttemptResult], restart: RestartSpec, pooled: bool,
                              want: Want) -> None:
    history = list(judged_history([dataclasses.replace(r, attempt=i)
                                   for i, r in enumerate(history)], restart.rules))
    decision = decide(history, restart, ports_allocated=True, pooled=pooled)
    assert (decision.action, decision.backoff_s, decision.counts) == \
        (want.action, want.backoff_s, want.counts), decision.reason
    assert want.reason in decision.reason


def test_only_a_pool_leaves_the_host_out() -> None:
    history = list(judged_history([E75], spec(LEAVE_75).rules))
    assert decide(history, spec(LEAVE_75), True, pooled=True).leave_out == {
        "h2": "restart.rules[0] (exit 75) leaves its host out"}
    assert decide(history, spec(LEAVE_75), True, pooled=False).leave_out == {}


def test_the_budget_and_the_record_honour_the_rules() -> None:
    restart = spec(UNCOUNTED_75, PREEMPTED_COUNTED)
    history = judged_history([E75, E75, failed(1), SAVED_143], restart.rules)
    assert restarts_used(history) == 2  # exit 1, and the preemption a rule counts
    assert [r.to_dict()["counted_against_budget"] for r in history] == [False, False, True, True]
    assert history[0].to_dict()["rule"]["action"] == "restart_uncounted"


# --- single-task restarts (parameter_server) ------------------------------------------------

CHIEF, PS0, W1 = TaskId("chief", 0), TaskId("ps", 0), TaskId("worker", 1)
PS_SPEC = RestartSpec(max_restarts=2, max_task_restarts=3, backoff_s=1.0, backoff_max_s=8.0)


def rule(action: RuleAction, *, at_start_up: bool = False) -> AppliedRule:
    return AppliedRule("restart.rules[0]" if not at_start_up else "built-in",
                       "exit 75" if not at_start_up else "ModuleNotFoundError", action,
                       at_start_up=at_start_up)


@pytest.mark.parametrize(("task", "applied", "tallies", "want"), [
    pytest.param(W1, rule(RuleAction.FAIL, at_start_up=True), {}, (TaskAction.FAIL, (), None),
                 id="worker-cannot-import"),
    pytest.param(W1, rule(RuleAction.RESTART_UNCOUNTED), {}, (TaskAction.RESTART, (W1,), None),
                 id="worker-uncounted"),
    pytest.param(W1, rule(RuleAction.RESTART_UNCOUNTED),
                 {TaskId("worker", 0): TaskTally(restarts=5, uncounted=5)},
                 (TaskAction.RESTART, (W1,), None), id="worker-uncounted-with-budget-spent-so"),
    pytest.param(W1, None, {TaskId("worker", 0): TaskTally(restarts=5, uncounted=5)},
                 (TaskAction.RESTART, (W1,), "task"), id="uncounted-restarts-leave-the-budget"),
    pytest.param(W1, None, {TaskId("worker", 0): TaskTally(restarts=3)},
                 (TaskAction.FAIL, (), None), id="counted-restarts-spend-it"),
    pytest.param(PS0, rule(RuleAction.RESTART_UNCOUNTED), {},
                 (TaskAction.RESTART, (PS0, CHIEF), None), id="ps-uncounted-with-the-chief"),
    pytest.param(CHIEF, rule(RuleAction.RESTART), {}, (TaskAction.RESTART, (CHIEF,), "job"),
                 id="chief-counted"),
])
def test_single_task_decisions_with_rules(task: TaskId, applied: AppliedRule | None,
                                          tallies: dict[TaskId, TaskTally],
                                          want: tuple[TaskAction, tuple[TaskId, ...], str | None]
                                          ) -> None:
    decision = decide_task(task, 60.0, preempted=False, tallies=tallies,
                           workers=(TaskId("worker", 0), W1), restart=PS_SPEC,
                           job_restarts_used=0, rule=applied)
    assert (decision.action, decision.restart, decision.budget) == want, decision.reason
    if applied is not None:
        assert decision.reason.startswith(applied.rule if not applied.at_start_up
                                           else "ModuleNotFoundError at start-up")


def test_a_single_task_restarts_on_its_own_host_whatever_the_rule_asks() -> None:
    leaving = dataclasses.replace(rule(RuleAction.RESTART_UNCOUNTED), exclude_host=True)
    decision = decide_task(W1, 60.0, preempted=False, tallies={}, workers=(W1,),
                           restart=PS_SPEC, job_restarts_used=0, rule=leaving)
    assert decision.reason.endswith("; its host cannot be left out: a task is started again on "
                                    "its own host and port")


def test_a_rule_that_restarts_counts_a_preempted_chief() -> None:
    decision = decide_task(CHIEF, 60.0, preempted=True, tallies={}, workers=(W1,),
                           restart=PS_SPEC, job_restarts_used=0, rule=rule(RuleAction.RESTART))
    assert decision.budget == "job" and "(restart 1 of 2)" in decision.reason


# --- the job loop ---------------------------------------------------------------------------

HOSTS = {f"h{i}": {"address": f"198.18.9.{i}"} for i in (1, 2, 3)}


def run(tmp_path: Path, data: dict[str, Any],
        scripts: Callable[[int, str], TaskScript]) -> tuple[JobResult, list[dict[str, Any]], str]:
    clock = SimClock()
    inbox = SimInbox(clock)
    world = FakeWorld(clock=clock, inbox_for=lambda: inbox, scripts=scripts)
    run_dir = RunDir(tmp_path / "run")
    backend = FakeBackend(world)
    planner = planner_for(spec_from_dict(data), backend, str(run_dir.path), str(tmp_path))
    err = io.StringIO()
    coordinator = Coordinator(planner, run_dir, backend, Console(out=io.StringIO(), err=err,
                                                                 colour=False),
                              seams=LoopSeams(clock=clock, new_inbox=lambda: inbox,
                                              spawn=run_inline,
                                              ports=PortAllocator(lock_dir=str(tmp_path / "p"))))
    result = coordinator.run()
    assert world.agents_closed == world.agents_started  # nothing left running
    return result, read_events(run_dir.events), err.getvalue()


def exits_75_once(attempt: int, task: str) -> TaskScript:
    if attempt == 0 and task == "worker:0":
        return TaskScript(steps=2, exit_code=75)
    return TaskScript(steps=20)


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind]


def test_a_rule_leaves_a_pool_host_out_after_one_failure(tmp_path: Path) -> None:
    data = {"name": "pool", "entrypoint": {"command": ["train"]}, "hosts": HOSTS,
            "tasks": [{"type": "chief"}, {"type": "worker"}],
            "placement": {"hosts": ["h1", "h2", "h3"]},  # exclude_after_failures: 2
            "restart": {"max_restarts": 0, "rules": [LEAVE_75]}}
    result, events, err = run(tmp_path, data, exits_75_once)

    assert result.state is JobState.SUCCEEDED
    assert [e["placement"]["worker:0"] for e in of(events, "attempt_placed")] == ["h2", "h3"]
    left, = of(events, "host_left_out")
    assert (left["host"], left["attempt"], left["reason"]) == (
        "h2", 1, "restart.rules[0] (exit 75) leaves its host out")
    restarting, = of(events, "job_restarting")
    assert restarting["counts_against_budget"] is False and restarting["backoff_s"] == 0
    assert "host h2 is left out: restart.rules[0] (exit 75) leaves its host out" in err


def test_named_hosts_cannot_be_left_out_and_the_job_goes_on(tmp_path: Path) -> None:
    data = {"name": "named", "entrypoint": {"command": ["train"]}, "hosts": HOSTS,
            "tasks": [{"type": "chief", "host": "h1", "port": 2222},
                      {"type": "worker", "host": "h2", "port": 2222}],
            "restart": {"max_restarts": 0, "rules": [LEAVE_75]}}
    result, events, err = run(tmp_path, data, exits_75_once)

    assert result.state is JobState.SUCCEEDED
    restarting, = of(events, "job_restarting")
    assert "its host h2 cannot be left out" in restarting["reason"]
    assert not of(events, "host_left_out")
    assert err.count("cannot be left out") == 1


def test_the_do_not_restart_exit_code_ends_the_job_without_backoff(tmp_path: Path) -> None:
    data = {"name": "stop", "entrypoint": {"command": ["train"]}, "hosts": HOSTS,
            "tasks": [{"type": "chief", "host": "h1", "port": 2222},
                      {"type": "worker", "host": "h2", "port": 2222}],
            "restart": {"max_restarts": 5, "backoff_s": 10.0}}
    result, events, _ = run(tmp_path, data, lambda attempt, task: TaskScript(
        steps=3, exit_code=78) if task == "worker:0" else TaskScript(steps=50))

    assert (result.state, result.exit_code) == (JobState.FAILED, 78)
    assert len(of(events, "attempt_started")) == 1 and not of(events, "job_restarting")
    failed_event, = of(events, "job_failed")
    assert "asks not to be restarted" in failed_event["reason"]
    assert failed_event["ts"] - of(events, "task_failed")[0]["ts"] < 5.0  # no 10 s backoff
