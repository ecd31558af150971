"""Health of one attempt: hung tasks, tasks stuck at start-up, and silent (lost) hosts.

The monitor is fed what the agents report (task started, step reached, any message from a host) with
the time it arrived, and answers two questions: what is unhealthy *now*, and when must it be asked
next (so the coordinator sleeps exactly until then instead of polling). It reads no clock itself,
which makes it testable with scripted times.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.job.failures import FailureKind
from launcher.spec.model import HealthSpec


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
    def __init__(self, health: HealthSpec, now: float) -> None:
        self.health = health
        self.attempt_started = now
        self.tasks: dict[str, _Task] = {}
        self.hosts: dict[str, float] = {}

    def host_seen(self, host: str, now: float) -> None:
        self.hosts[host] = now

    def host_gone(self, host: str) -> None:
        self.hosts.pop(host, None)

    def task_started(self, task: str, host: str, now: float) -> None:
        self.tasks[task] = _Task(host=host, started_at=now)

    def progress(self, task: str, step: int, now: float) -> None:
        state = self.tasks.get(task)
        if state is None or state.step == step:
            return  # the same step again is not progress
        state.step, state.step_changed_at = step, now

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

    def check(self, now: float) -> list[HealthIssue]:
        """Issues whose deadline has passed, the longest-standing first."""
        due = [issue for deadline, issue in self._deadlines() if deadline <= now]
        return sorted(due, key=lambda issue: issue.since)

    def next_deadline(self) -> float | None:
        deadlines = [deadline for deadline, _ in self._deadlines()]
        return min(deadlines) if deadlines else None
