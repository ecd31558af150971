"""The tasks of one attempt as the coordinator tracks them: one :class:`TaskState` each.

Transitions (anything else is a bug and raises):

- ``PENDING`` -> ``RUNNING`` when its agent reports it started;
- ``PENDING`` / ``RUNNING`` -> ``SUCCEEDED`` (exit 0), ``FAILED`` (it died, hung, or its host was
  lost) or ``STOPPED`` (it exited because tfcluster was stopping the attempt, or the task);
- ``FAILED`` / ``STOPPED`` -> ``PENDING`` when it is started again alone, the others running on
  (a ParameterServerStrategy restart: :mod:`launcher.job.task_policy`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

from launcher.plan.planner import TaskPlan
from worker.wire.tfconfig import TRAINING_TYPES


class TaskState(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def active(self) -> bool:
        """Not over yet: the task may still run, report or exit."""
        return self in (TaskState.PENDING, TaskState.RUNNING)


_ALLOWED = {
    TaskState.PENDING: {TaskState.RUNNING, TaskState.SUCCEEDED, TaskState.FAILED,
                        TaskState.STOPPED},
    TaskState.RUNNING: {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED},
    TaskState.FAILED: {TaskState.PENDING},  # started again alone (ParameterServerStrategy)
    TaskState.STOPPED: {TaskState.PENDING},
}


class TaskTransitionError(RuntimeError):
    """A task was moved to a state its current state does not lead to (a bug, not bad input)."""


@dataclass
class TaskRuntime:
    plan: TaskPlan
    state: TaskState = TaskState.PENDING
    pid: int | None = None
    first_step: int | None = None
    step: int | None = None
    last_progress_event: float = 0.0
    #: The checkpoint this task said it could not restore.
    restore_failed: str | None = None

    @property
    def name(self) -> str:
        return str(self.plan.task)

    def progress(self, step: int, at: float, event_interval_s: float) -> tuple[bool, bool]:
        """Record a reported step: (whether it is the task's first, whether a progress event is
        due: the first, then at most one per ``event_interval_s``)."""
        first = self.first_step is None
        if first:
            self.first_step = step
        self.step = step
        due = first or at - self.last_progress_event >= event_interval_s
        if due:
            self.last_progress_event = at
        return first, due

    def again(self) -> None:
        """Started again alone: what it reported before is forgotten."""
        self.to(TaskState.PENDING)
        self.pid = self.first_step = self.step = self.restore_failed = None
        self.last_progress_event = 0.0

    def to(self, state: TaskState) -> None:
        if state not in _ALLOWED.get(self.state, set()):
            allowed = ", ".join(s.value for s in _ALLOWED.get(self.state, ())) or "none"
            raise TaskTransitionError(
                f"task {self.name} cannot go from {self.state.value} to {state.value}; "
                f"allowed: {allowed}")
        self.state = state


class TaskTable:
    """Every task of one attempt, in plan order (chief, workers, evaluator)."""

    def __init__(self, tasks: Sequence[TaskPlan]) -> None:
        self._tasks = {str(t.task): TaskRuntime(t) for t in tasks}

    def __getitem__(self, task: str) -> TaskRuntime:
        return self._tasks[task]

    def __iter__(self) -> Iterator[TaskRuntime]:
        return iter(self._tasks.values())

    @property
    def all_succeeded(self) -> bool:
        return all(t.state is TaskState.SUCCEEDED for t in self)

    @property
    def any_active(self) -> bool:
        return any(t.state.active for t in self)

    @property
    def none_pending(self) -> bool:
        return all(t.state is not TaskState.PENDING for t in self)

    def active_on(self, host: str) -> list[TaskRuntime]:
        return [t for t in self if t.plan.host == host and t.state.active]

    def on(self, host: str) -> list[TaskRuntime]:
        return [t for t in self if t.plan.host == host]

    def max_step(self) -> int | None:
        steps = [t.step for t in self if t.step is not None]
        return max(steps) if steps else None

    def start_steps(self) -> dict[str, int] | None:
        """The first step of every training task once each has reported one, if they differ
        (they restored different checkpoints); None otherwise."""
        firsts = {t.name: t.first_step for t in self if t.plan.task.type in TRAINING_TYPES}
        if any(step is None for step in firsts.values()) or len(set(firsts.values())) <= 1:
            return None
        return {task: step for task, step in firsts.items() if step is not None}
