"""The restart policy of a ParameterServerStrategy job, one task at a time: a pure function of
the failed task, what its restarts so far were, and the spec's ``restart`` section. (The
whole-job policy of a multi_worker_mirrored job is :mod:`launcher.job.policy`; TF's
``mwms_peer_failure_test`` shows why a lock-step job cannot take a single task back.)

What TensorFlow expects of the cluster manager (``ClusterCoordinator``'s docstring):

- a **worker** that fails is restarted **alone**, on the same host and port; the chief's
  coordinator goes on scheduling on the others and takes it back once it answers;
- a **parameter server** that fails takes the variables it held with it: the chief's
  coordinator raises ``UnavailableError``; the ps is restarted, and the chief with it, resuming
  from its latest checkpoint (the workers hold no state and stay up);
- a **chief** that fails is restarted from its latest checkpoint, the servers staying up;
- an **evaluator** (a sidecar reading checkpoints) is restarted alone.

Workers and evaluators spend ``restart.max_task_restarts``; the chief's restarts (its own, or
with a ps) restart the training and spend ``restart.max_restarts``. A task that fails
``restart.task_crash_loop`` times in a row, each within ``restart.task_crash_window_s`` of its
start, is in a crash loop: a worker in one is left out and the job goes on without it (the job
fails when no worker is left); any other task in one ends the job. A failure rule that matched the
task's failure (:mod:`launcher.job.failure_rules`) decides first: ``fail`` ends the job,
``restart`` is counted even for a preemption, ``restart_uncounted`` spends neither budget (a crash
loop still leaves a worker out). Tested with tables in ``tests/unit/job/test_task_policy.py``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from enum import Enum

from launcher.job.failure_rules import rule_reason
from launcher.job.policy import backoff
from launcher.run.outcome import AppliedRule
from launcher.spec.failure_rules import RuleAction
from launcher.spec.health import RestartSpec
from worker.wire.tfconfig import CHIEF, PS, WORKER, TaskId


class TaskAction(str, Enum):
    RESTART = "restart"  # the tasks in Decision.restart, the others running on
    LEAVE_OUT = "leave_out"  # a worker in a crash loop: the job goes on without it
    FAIL = "fail"  # the job ends


@dataclass(frozen=True)
class TaskTally:
    """One task's restarts over the job."""

    restarts: int = 0
    #: Of ``restarts``, those that spent no budget (a failure rule's ``restart_uncounted``, a
    #: preempted chief's).
    uncounted: int = 0
    #: Failures in a row that came within ``restart.task_crash_window_s`` of the task's start.
    quick_failures: int = 0
    last_reason: str | None = None
    left_out: bool = False


@dataclass(frozen=True)
class TaskDecision:
    action: TaskAction
    reason: str
    #: The tasks to start again (the failed one first), once any still running has stopped.
    restart: tuple[TaskId, ...] = ()
    backoff_s: float = 0.0
    #: Which budget it spends: ``"task"`` (max_task_restarts) or ``"job"`` (max_restarts).
    budget: str | None = None


def quick(uptime_s: float, restart: RestartSpec) -> bool:
    """Whether a failure after ``uptime_s`` counts towards a crash loop."""
    return uptime_s < restart.task_crash_window_s


def decide_task(task: TaskId, uptime_s: float, *, preempted: bool,
                tallies: Mapping[TaskId, TaskTally], workers: Collection[TaskId],
                restart: RestartSpec, job_restarts_used: int,
                rule: AppliedRule | None = None) -> TaskDecision:
    """What to do after ``task`` failed ``uptime_s`` after its start. ``preempted``: it exited
    with a preemption code (it saved first): the chief's restart is then not counted.
    ``tallies``: the tasks' restarts so far; ``workers``: every worker of the job;
    ``job_restarts_used``: restarts of the training so far (the chief's, and the whole job's);
    ``rule``: the failure rule that matched its failure, if one did."""
    if rule is None:
        return _by_default(task, uptime_s, preempted=preempted, tallies=tallies, workers=workers,
                           restart=restart, job_restarts_used=job_restarts_used, uncounted=False)
    if rule.action is RuleAction.FAIL:
        return TaskDecision(TaskAction.FAIL, rule_reason(rule))
    decision = _by_default(task, uptime_s, preempted=False, tallies=tallies, workers=workers,
                           restart=restart, job_restarts_used=job_restarts_used,
                           uncounted=rule.action is RuleAction.RESTART_UNCOUNTED)
    kept = "; its host cannot be left out: a task is started again on its own host and port" \
        if rule.exclude_host and decision.action is TaskAction.RESTART else ""
    return replace(decision, reason=f"{rule_reason(rule)}; {decision.reason}{kept}")


def _by_default(task: TaskId, uptime_s: float, *, preempted: bool,
                tallies: Mapping[TaskId, TaskTally], workers: Collection[TaskId],
                restart: RestartSpec, job_restarts_used: int, uncounted: bool) -> TaskDecision:
    """The policy without rules; ``uncounted``: a restart spends no budget."""
    mine = tallies.get(task, TaskTally())
    streak = mine.quick_failures + 1 if quick(uptime_s, restart) else 0
    loop = restart.task_crash_loop
    looping = loop is not None and streak >= loop
    window = f"{restart.task_crash_window_s:g}s"
    if task.type == WORKER and looping:
        if not any(w != task and not tallies.get(w, TaskTally()).left_out for w in workers):
            return TaskDecision(TaskAction.FAIL, f"{task} is in a crash loop ({streak} failures "
                                f"within {window} of its start) and no other worker is left")
        return TaskDecision(TaskAction.LEAVE_OUT, f"crash loop: {streak} failures in a row within "
                            f"{window} of its start; the job goes on without it")
    if looping:
        return TaskDecision(TaskAction.FAIL, f"{task} is in a crash loop: {streak} failures in a "
                            f"row within {window} of its start (restart.task_crash_loop)")
    if uncounted:
        tasks = _with_chief(task)
        wait = backoff(restart, max(streak - 1, 0))
        return TaskDecision(TaskAction.RESTART, f"restarting {_who(task)} {_when(wait)}",
                            restart=tasks, backoff_s=wait)
    if task.type in (CHIEF, PS):
        return _training_restart(task, preempted, streak, restart, job_restarts_used)
    used = sum(tally.restarts - tally.uncounted for t, tally in tallies.items()
               if t.type not in (CHIEF, PS))
    if used >= restart.max_task_restarts:
        return TaskDecision(TaskAction.FAIL, f"gave up after {used} single-task restart(s) "
                            f"(restart.max_task_restarts = {restart.max_task_restarts})")
    wait = backoff(restart, max(streak - 1, 0))
    return TaskDecision(TaskAction.RESTART, f"restarting it alone {_when(wait)} (task restart "
                        f"{used + 1} of {restart.max_task_restarts}); the chief trains on",
                        restart=(task,), backoff_s=wait, budget="task")


def _when(wait_s: float) -> str:
    return f"in {wait_s:.1f}s" if wait_s else "now"


def _with_chief(task: TaskId) -> tuple[TaskId, ...]:
    """What is started again after ``task`` failed: a ps with the chief, any other task alone."""
    return (task, TaskId(CHIEF, 0)) if task.type == PS else (task,)


def _who(task: TaskId) -> str:
    return {CHIEF: "the chief", PS: "it and the chief"}.get(task.type, "it alone")


def _training_restart(task: TaskId, preempted: bool, streak: int, restart: RestartSpec,
                      used: int) -> TaskDecision:
    """The chief restarts from its latest checkpoint: alone, or with the ps that failed."""
    chief = TaskId(CHIEF, 0)
    tasks = _with_chief(task)
    who = _who(task)
    if preempted:
        return TaskDecision(TaskAction.RESTART, f"graceful preemption: restarting {who} now "
                            "(not counted against restart.max_restarts)",
                            restart=tasks)
    if restart.max_restarts == 0:
        return TaskDecision(TaskAction.FAIL, f"{task} failed and restarts are off "
                            "(restart.max_restarts = 0)")
    if used >= restart.max_restarts:
        return TaskDecision(TaskAction.FAIL, f"gave up after {used} restart(s) "
                            f"(restart.max_restarts = {restart.max_restarts})")
    stay = "the servers stay up" if task == chief else "the workers stay up"
    wait = backoff(restart, max(streak - 1, 0))
    return TaskDecision(TaskAction.RESTART, f"restarting {who} {_when(wait)} (restart "
                        f"{used + 1} of {restart.max_restarts}); {stay}", restart=tasks,
                        backoff_s=wait, budget="job")
