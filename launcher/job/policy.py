"""The restart policy: a pure function of the attempts so far and the spec's ``restart`` section.

It returns a :class:`Decision` that says what to do and why; the coordinator only carries it out and
logs the reason. Tested with tables in ``tests/unit/job/test_policy.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

from launcher.job.failure_rules import host_note, rule_reason
from launcher.run.failures import FailureKind
from launcher.run.outcome import AppliedRule, AttemptResult, AttemptStatus
from launcher.spec.failure_rules import RuleAction
from launcher.spec.health import RestartSpec

#: Start-up port clashes are retried on fresh ports this many times, outside the restart budget.
MAX_PORT_RETRIES = 5


class Action(str, Enum):
    SUCCEED = "succeed"
    RESTART = "restart"
    FAIL = "fail"


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    backoff_s: float = 0.0
    #: Whether this restart uses up one of ``restart.max_restarts``.
    counts: bool = False
    #: Whether the next attempt must get freshly allocated ports.
    fresh_ports: bool = False
    #: Hosts a failure rule leaves out of the next attempt (``exclude_host``), with why.
    leave_out: Mapping[str, str] = field(default_factory=dict)


def restarts_used(history: Sequence[AttemptResult]) -> int:
    """Restarts charged to the budget: failed attempts, except start-up port clashes and justified
    graceful preemptions, and the chief's restarts within attempts (ParameterServerStrategy)."""
    return sum(int(r.charged) + r.training_restarts for r in history)


#: Beyond this many doublings the cap has long been reached (and 2.0**n would overflow).
MAX_DOUBLINGS = 64


def backoff(restart: RestartSpec, used: int) -> float:
    """Exponential backoff: ``backoff_s * 2**used``, capped at ``backoff_max_s``."""
    return float(min(restart.backoff_s * 2.0 ** min(used, MAX_DOUBLINGS), restart.backoff_max_s))


def preemption_backoff(history: Sequence[AttemptResult], restart: RestartSpec) -> float:
    """The wait before an uncounted preemption restart after the last attempt of ``history``: none
    for the first of a run of justified preemptions (the work is saved, the machine was taken
    away), ``restart.backoff_s`` for each one after it, so that no run of them can spin."""
    streak = 0
    for result in reversed(history[:-1]):
        if not result.preemption_justified:
            break
        streak += 1
    return 0.0 if streak == 0 else float(restart.backoff_s)


def uncounted_backoff(history: Sequence[AttemptResult], restart: RestartSpec) -> float:
    """The wait before a restart a failure rule does not count (``restart_uncounted``): none for
    the first of a run of them, then exponential, so that no run of them can spin."""
    streak = 0
    for result in reversed(history[:-1]):
        if result.rule is None or result.rule.action is not RuleAction.RESTART_UNCOUNTED:
            break
        streak += 1
    return 0.0 if streak == 0 else backoff(restart, streak - 1)


def crash_loop_length(history: Sequence[AttemptResult]) -> int:
    """How many of the latest charged attempts in a row moved no checkpoint forward."""
    run = 0
    for result in reversed(history):
        if not result.charged:
            continue
        if result.made_progress is not False:
            break
        run += 1
    return run


def _preemption_reason(last: AttemptResult) -> str:
    outside = "not counted against restart.max_restarts"
    if last.made_progress:
        return (f"graceful preemption: resuming from the checkpoint it saved (step "
                f"{last.checkpoint_step}; {outside})")
    step = last.checkpoint_step
    start = "the beginning (no checkpoint)" if step is None else \
        f"the last checkpoint (step {step}), as the attempt saved no newer one"
    return f"graceful preemption ({last.preemption_notice}): restarting from {start} ({outside})"


def _counted(prefix: str | None, text: str) -> str:
    return text if prefix is None else f"{prefix}; {text}"


def _charged_restart(history: Sequence[AttemptResult], restart: RestartSpec,
                     prefix: str | None) -> Decision:
    """A failure that uses up the budget: restart with exponential backoff, or give up.
    ``prefix`` says why an exit that looked restartable is counted."""
    last = history[-1]
    used = restarts_used(history[:-1]) + last.training_restarts
    if restart.max_restarts == 0:
        return Decision(Action.FAIL, _counted(prefix, "a task failed and restarts are off "
                                              "(restart.max_restarts = 0)"))
    if used >= restart.max_restarts:
        return Decision(Action.FAIL, _counted(prefix, f"gave up after {used} restart(s) "
                                              f"(restart.max_restarts = {restart.max_restarts})"))
    loop = crash_loop_length(history)
    if restart.crash_loop_attempts is not None and loop >= restart.crash_loop_attempts:
        step = last.checkpoint_step
        return Decision(Action.FAIL, _counted(prefix, f"crash loop: {loop} attempts in a row made "
                                              f"no checkpoint progress (latest checkpoint step: "
                                              f"{'none' if step is None else step})"))
    budget = f"restart {used + 1} of {restart.max_restarts}"
    return Decision(Action.RESTART, budget if prefix is None else f"{prefix} ({budget})",
                    backoff_s=backoff(restart, used), counts=True)


def _by_rule(history: Sequence[AttemptResult], restart: RestartSpec, rule: AppliedRule,
             pooled: bool) -> Decision:
    """What a failure rule (:mod:`launcher.job.failure_rules`) decided for the last attempt."""
    last = history[-1]
    if rule.action is RuleAction.FAIL:
        return Decision(Action.FAIL, rule_reason(rule, last.attempt))
    cause = last.root_cause
    host = None if cause is None or cause.kind is FailureKind.LOST_HOST else cause.host
    note = host_note(rule, host, pooled=pooled)
    leave_out = {host: f"{rule.rule} ({rule.matched}) leaves its host out"} \
        if note and pooled and host is not None else {}
    if rule.action is RuleAction.RESTART_UNCOUNTED:
        return Decision(Action.RESTART, rule_reason(rule, last.attempt) + note,
                        backoff_s=uncounted_backoff(history, restart), leave_out=leave_out)
    decision = _charged_restart(history, restart, rule_reason(rule, last.attempt))
    if decision.action is not Action.RESTART:
        return decision
    return replace(decision, reason=decision.reason + note, leave_out=leave_out)


def decide(history: Sequence[AttemptResult], restart: RestartSpec,
           ports_allocated: bool, pooled: bool = False) -> Decision:
    """What to do after the last attempt in ``history`` (which must not be empty).

    After tfcluster's own cases (success, a stop, a resize, a port clash, tasks begun at
    different steps), a failure rule that matched the root cause (:attr:`AttemptResult.rule`, set
    by :func:`launcher.job.failure_rules.judged`) decides before the default policy: fail now,
    restart (counted, with backoff) or restart uncounted (no backoff for the first of a run of
    them); with ``exclude_host`` the failed task's host is left out when the job is placed from
    a pool (``pooled``), and the reason says when it cannot be.

    A graceful preemption (an exit with one of ``restart.preemption_exit_codes``: 42, TensorFlow's
    PreemptionCheckpointHandler, and 143 by default) restarts outside the budget only when it is
    justified (see :attr:`AttemptResult.preemption_justified`); otherwise it is a failure like any
    other, and the reason says so. Every charged restart backs off exponentially; uncounted preemption
    restarts back off by :func:`preemption_backoff`; port clashes retry at once on fresh ports,
    at most :data:`MAX_PORT_RETRIES` times.
    """
    last = history[-1]
    if last.status is AttemptStatus.SUCCEEDED:
        return Decision(Action.SUCCEED, "the chief exited 0 (the servers were stopped)"
                        if last.chief_finished else "every task exited 0")
    if last.gave_up is not None:  # a ParameterServerStrategy task's restarts ran out
        return Decision(Action.FAIL, last.gave_up)
    if last.status is AttemptStatus.INTERRUPTED:
        return Decision(Action.FAIL, f"tfcluster was stopped by {last.interrupt_signal}")
    if last.status is AttemptStatus.RESIZED:
        return Decision(Action.RESTART, f"{last.resized} (not counted against "
                        "restart.max_restarts)")
    kind = last.cause_kind
    if kind is FailureKind.STEP_MISMATCH:
        return Decision(Action.FAIL, "the tasks started from different steps; a restart would "
                        "fail the same way")
    if kind is FailureKind.PORT_CONFLICT:
        port_retries = sum(1 for r in history if r.port_conflict)
        if not ports_allocated:
            return Decision(Action.FAIL, "a task could not bind the port the spec gives it; "
                            "free the port or choose another one in the spec")
        if port_retries <= MAX_PORT_RETRIES:
            return Decision(Action.RESTART, "a task could not bind its port at start-up; "
                            "retrying on fresh ports", fresh_ports=True)
        return Decision(Action.FAIL, f"tasks could not bind their ports even after "
                        f"{MAX_PORT_RETRIES} retries on fresh ports; is something taking "
                        "every port it can?")
    if last.rule is not None:
        return _by_rule(history, restart, last.rule, pooled)
    prefix = None
    if kind is FailureKind.PREEMPTED:
        if last.preemption_justified:
            return Decision(Action.RESTART, _preemption_reason(last),
                            backoff_s=preemption_backoff(history, restart))
        cause = last.root_cause
        code = cause.exit_code if cause is not None else None
        prefix = f"exit {code} but no new checkpoint: counted as a failure"
        if last.preemption_notice is not None:  # the notice no longer excuses it
            prefix = (f"exit {code} after a preemption notice, but the last "
                      f"{last.unsaved_preemptions_before + 1} preemptions in a row saved no newer "
                      "checkpoint: counted as a failure")
    return _charged_restart(history, restart, prefix)
