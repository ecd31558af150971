"""Health of one attempt: hung tasks, tasks stuck at start-up, and silent (lost) hosts.

A deadline a script never opted into must not kill it: hang detection starts with a task's first
step report (a script that never calls ``worker.report`` is never "hung"), and the start-up
deadline applies when the spec sets ``health.startup_timeout_s`` or when an earlier attempt of
the job reported steps (so the script is known to report): :func:`in_force`.

The monitor is fed what the agents report (task started, step reached, any message from a host) with
the time it arrived, and answers two questions: what is unhealthy *now*, and when must it be asked
next (so the coordinator sleeps exactly until then instead of polling). It reads no clock itself,
which makes it testable with scripted times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from launcher.run.failures import FailureKind
from launcher.run.outcome import AttemptResult
from launcher.spec.health import HealthSpec


def startup_timeout_set(health: HealthSpec) -> bool:
    """Whether the spec itself sets ``startup_timeout_s`` (a value or null)."""
    return "startup_timeout_s" in health.model_fields_set


def in_force(health: HealthSpec, earlier: Sequence[AttemptResult]) -> HealthSpec:
    """The health settings the next attempt is held to: the spec's, without the default
    start-up deadline unless one of the ``earlier`` attempts reported steps."""
    if startup_timeout_set(health) or any(a.max_step is not None for a in earlier):
        return health
    return health.model_copy(update={"startup_timeout_s": None})


@dataclass
class _Task:
    host: str
    started_at: float
    step: int | None = None
    step_changed_at: float | None = None
    done: bool = False


@dataclass(frozen=True)
class HealthIssue:
    kind: FailureKind  # HUNG, STARTUP_TIMEOUT or LOST_HOST
    host: str
    task: str | None
    since: float  # when the task last made progress / was last heard of
    message: str


class HealthMonitor:
    """Feeding it is O(1); every deadline is looked at again only once the earliest one that
    may have passed is due (with 64 tasks reporting, a scan per message was a real share of
    the coordinator's CPU)."""

    def __init__(self, health: HealthSpec, now: float) -> None:
        self.health = health
        self.attempt_started = now
        self.tasks: dict[str, _Task] = {}
        self.hosts: dict[str, float] = {}
        #: No deadline is earlier than this (-inf: not known, scan; inf: there is none). What is
        #: fed in can only add a deadline or move one later, so lowering it keeps it true.
        self._bound = -math.inf
        self._latest = now  # the latest time fed in

    def _may_fire_at(self, deadline: float, now: float) -> None:
        self._bound = min(self._bound, deadline)
        self._latest = max(self._latest, now)

    def host_seen(self, host: str, now: float) -> None:
        if host not in self.hosts:
            self._may_fire_at(now + self.health.heartbeat_timeout_s, now)
        self.hosts[host] = now
        self._latest = max(self._latest, now)

    def host_gone(self, host: str) -> None:
        self.hosts.pop(host, None)

    def task_started(self, task: str, host: str, now: float) -> None:
        self.tasks[task] = _Task(host=host, started_at=now)
        if (startup := self.health.startup_timeout_s) is not None:
            self._may_fire_at(now + startup, now)

    def progress(self, task: str, step: int, now: float) -> None:
        state = self.tasks.get(task)
        if state is None or state.step == step:
            return  # the same step again is not progress
        state.step, state.step_changed_at = step, now
        if (hang := self.health.hang_timeout_s) is not None:
            self._may_fire_at(now + hang, now)

    def task_done(self, task: str) -> None:
        if task in self.tasks:
            self.tasks[task].done = True

    def _deadlines(self) -> list[tuple[float, HealthIssue]]:
        """Every pending deadline with the issue that fires if it passes."""
        found: list[tuple[float, HealthIssue]] = []
        hang, startup = self.health.hang_timeout_s, self.health.startup_timeout_s
        for name, task in self.tasks.items():
            if task.done:
                continue
            if task.step_changed_at is not None and hang is not None:
                found.append((task.step_changed_at + hang, HealthIssue(
                    FailureKind.HUNG, task.host, name, task.step_changed_at,
                    f"no new step for {hang:g}s (stuck after step {task.step})")))
            elif task.step_changed_at is None and startup is not None:
                found.append((task.started_at + startup, HealthIssue(
                    FailureKind.STARTUP_TIMEOUT, task.host, name, task.started_at,
                    f"reported no training step within {startup:g}s of starting")))
        timeout = self.health.heartbeat_timeout_s
        for host, seen in self.hosts.items():
            found.append((seen + timeout, HealthIssue(
                FailureKind.LOST_HOST, host, None, seen,
                f"its agent sent nothing (not even a heartbeat) for {timeout:g}s")))
        return found

    def _scan(self) -> list[tuple[float, HealthIssue]]:
        found = self._deadlines()
        self._bound = min((deadline for deadline, _ in found), default=math.inf)
        return found

    def check(self, now: float, stalled_s: float = 0.0) -> list[HealthIssue]:
        """Issues whose deadline has passed, the longest-standing first. ``stalled_s``: how long
        the coordinator itself just did not run (:mod:`launcher.job.stall`); every deadline moves
        on by as much first, since nobody else is to blame for that silence."""
        if stalled_s > 0:
            self._pause(stalled_s)
        self._latest = max(self._latest, now)
        if now < self._bound:
            return []
        due = [issue for deadline, issue in self._scan() if deadline <= now]
        return sorted(due, key=lambda issue: issue.since)

    def _pause(self, seconds: float) -> None:
        self.hosts = {host: seen + seconds for host, seen in self.hosts.items()}
        for task in self.tasks.values():
            task.started_at += seconds
            if task.step_changed_at is not None:
                task.step_changed_at += seconds
        self._bound = -math.inf

    def next_deadline(self) -> float | None:
        """When to call :meth:`check` next: the earliest deadline, or a time before it."""
        if self._bound <= self._latest:
            self._scan()
        return None if self._bound == math.inf else self._bound
