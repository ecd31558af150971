"""The restart policy: a pure function of the attempts so far and the spec's ``restart`` section.

It returns a :class:`Decision` that says what to do and why; the coordinator only carries it out and
logs the reason. Tested with tables in ``tests/unit/test_policy.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from launcher.outcome import AttemptResult, AttemptStatus
from launcher.spec import RestartSpec

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
    """Restarts charged to the budget: failed attempts except start-up port clashes."""
    return sum(1 for r in history if r.status is AttemptStatus.FAILED and not r.port_conflict)


def backoff(restart: RestartSpec, used: int) -> float:
    """Exponential backoff: ``backoff_s * 2**used``, capped at ``backoff_max_s``."""
    return float(min(restart.backoff_s * (2 ** used), restart.backoff_max_s))


def decide(history: Sequence[AttemptResult], restart: RestartSpec,
           ports_allocated: bool) -> Decision:
    """What to do after the last attempt in ``history`` (which must not be empty)."""
    last = history[-1]
    if last.status is AttemptStatus.SUCCEEDED:
        return Decision(Action.SUCCEED, "every task exited 0")
    if last.status is AttemptStatus.INTERRUPTED:
        return Decision(Action.FAIL, f"tfcluster was stopped by {last.interrupt_signal}")
    if last.port_conflict:
        port_retries = sum(1 for r in history if r.port_conflict)
        if ports_allocated and port_retries <= MAX_PORT_RETRIES:
            return Decision(Action.RESTART, "a task could not bind its port at start-up; "
                            "retrying on fresh ports", fresh_ports=True)
        if not ports_allocated:
            return Decision(Action.FAIL, "a task could not bind the port the spec gives it; "
                            "free the port or choose another one in the spec")
    used = restarts_used(history[:-1])
    if used >= restart.max_restarts:
        return Decision(Action.FAIL, f"gave up after {used} restart(s) "
                        f"(restart.max_restarts = {restart.max_restarts})")
    return Decision(Action.RESTART, f"restart {used + 1} of {restart.max_restarts}",
                    backoff_s=backoff(restart, used), counts=True)
