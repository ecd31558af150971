"""Hooks into a running attempt: how a drill's fault injector (or any other observer that acts)
reaches the tasks without the attempt knowing about drills."""

from __future__ import annotations

import math
import signal
from typing import Protocol

from launcher.job.tasks import TaskState
from launcher.plan.planner import LaunchPlan
from launcher.run.events import Event


class TaskView(Protocol):
    @property
    def state(self) -> TaskState: ...


class TaskLookup(Protocol):
    def __getitem__(self, task: str) -> TaskView: ...


class TaskControl(Protocol):
    """What a hook may do to the running attempt."""

    @property
    def attempt(self) -> int: ...

    @property
    def plan(self) -> LaunchPlan:
        """What the attempt launched (its hosts, tasks, checkpoint directory)."""

    @property
    def tasks(self) -> TaskLookup:
        """Each task's state in this attempt (a signal reaches only a running one)."""

    @property
    def started_at(self) -> float:
        """When the attempt began starting its tasks (the attempt's clock)."""

    @property
    def first_progress_at(self) -> float | None:
        """When a task of the attempt first reported a step, if one has."""

    def signal_task(self, task: str, sig: signal.Signals) -> str | None:
        """Send ``sig`` to one task; the host it runs on, or None if it cannot be reached."""

    def emit(self, event: Event) -> None: ...

    def warn(self, text: str) -> None: ...


class AttemptHooks(Protocol):
    """Called by the attempt as it runs (a drill's fault injector is one)."""

    def on_progress(self, control: TaskControl, task: str, step: int) -> None: ...

    def on_tick(self, control: TaskControl, now: float) -> float:
        """Called each time the running attempt's loop wakes (``now`` on its clock); returns when
        the hook next wants to be called (``math.inf`` for "only when something happens")."""

    def on_exited(self, control: TaskControl, task: str) -> None:
        """``task``'s process has exited (its agent reaped it), before the attempt acts on it:
        before the attempt stops, before a task is started again."""


class HookList:
    """Several hooks as one (a drill's and the pool's grow watch)."""

    def __init__(self, *hooks: AttemptHooks | None) -> None:
        self.hooks = [hook for hook in hooks if hook is not None]

    def on_progress(self, control: TaskControl, task: str, step: int) -> None:
        for hook in self.hooks:
            hook.on_progress(control, task, step)

    def on_tick(self, control: TaskControl, now: float) -> float:
        return min((hook.on_tick(control, now) for hook in self.hooks), default=math.inf)

    def on_exited(self, control: TaskControl, task: str) -> None:
        for hook in self.hooks:
            hook.on_exited(control, task)
