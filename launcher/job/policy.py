"""The restart policy: a pure function of the attempts so far and the spec's ``restart`` section.

It returns a :class:`Decision` that says what to do and why; the coordinator only carries it out and
logs the reason. Tested with tables in ``tests/unit/test_policy.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from launcher.job.failures import FailureKind
from launcher.job.outcome import AttemptResult, AttemptStatus
from launcher.spec.model import RestartSpec

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


def restarts_used(history: Sequence[AttemptResult]) -> int:
    """Restarts charged to the budget: failed attempts, except start-up port clashes and graceful
    preemptions."""
    return sum(1 for r in history if r.charged)


def backoff(restart: RestartSpec, used: int) -> float:
    """Exponential backoff: ``backoff_s * 2**used``, capped at ``backoff_max_s``."""
    return float(min(restart.backoff_s * (2 ** used), restart.backoff_max_s))


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


def decide(history: Sequence[AttemptResult], restart: RestartSpec,
           ports_allocated: bool) -> Decision:
    """What to do after the last attempt in ``history`` (which must not be empty)."""
    last = history[-1]
    if last.status is AttemptStatus.SUCCEEDED:
        return Decision(Action.SUCCEED, "every task exited 0")
    if last.status is AttemptStatus.INTERRUPTED:
        return Decision(Action.FAIL, f"tfcluster was stopped by {last.interrupt_signal}")
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
    if kind is FailureKind.PREEMPTED:
        return Decision(Action.RESTART, "graceful preemption: resuming from the checkpoint it "
                        "saved (not counted against restart.max_restarts)")
    used = restarts_used(history[:-1])
    if restart.max_restarts == 0:
        return Decision(Action.FAIL, "a task failed and restarts are off "
                        "(restart.max_restarts = 0)")
    if used >= restart.max_restarts:
        return Decision(Action.FAIL, f"gave up after {used} restart(s) "
                        f"(restart.max_restarts = {restart.max_restarts})")
    loop = crash_loop_length(history)
    if restart.crash_loop_attempts is not None and loop >= restart.crash_loop_attempts:
        step = last.checkpoint_step
        return Decision(Action.FAIL, f"crash loop: {loop} attempts in a row made no checkpoint "
                        f"progress (latest checkpoint step: "
                        f"{'none' if step is None else step})")
    return Decision(Action.RESTART, f"restart {used + 1} of {restart.max_restarts}",
                    backoff_s=backoff(restart, used), counts=True)
