"""The tasks of one attempt as the coordinator tracks them: one :class:`TaskState` each.

Transitions (anything else is a bug and raises):

- ``PENDING`` -> ``RUNNING`` when its agent reports it started;
- ``PENDING`` / ``RUNNING`` -> ``SUCCEEDED`` (exit 0), ``FAILED`` (it died, hung, or its host was
  lost) or ``STOPPED`` (it exited because tfcluster was stopping the attempt, or the task);
- ``FAILED`` / ``STOPPED`` -> ``PENDING`` when it is started again alone, the others running on
  (a ParameterServerStrategy restart: :mod:`launcher.job.task_policy`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

from launcher.plan.planner import TaskPlan
from launcher.run.events import Event, TaskProgress
from launcher.run.step_figures import reached_step
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
    #: The last report (step, when it arrived) not written as an event yet: written at its exit.
    unsent: tuple[int, float] | None = None
    #: The checkpoint this task said it could not restore.
    restore_failed: str | None = None
    #: The step at which it said it saved on a preemption notice (``preempted`` report): a
    #: SIGTERM that ends it afterwards, while it exits, is still that preemption.
    saved_preemption: int | None = None

    @property
    def name(self) -> str:
        return str(self.plan.task)

    def progress(self, attempt: int, step: int, at: float,
                 event_interval_s: float) -> tuple[bool, TaskProgress | None]:
        """Record a reported step: whether it is the task's first, and its progress event if one
        is due (the first, then at most one per ``event_interval_s``; the last report is written
        by :meth:`unsent_progress` when the task exits)."""
        first = self.first_step is None
        if first:
            self.first_step = step
        self.step = step
        if not first and at - self.last_progress_event < event_interval_s:
            self.unsent = (step, at)
            return first, None
        self.last_progress_event, self.unsent = at, None
        return first, TaskProgress(attempt, task=self.name, step=step, metrics={}, first=first,
                                   received_at=at)  # metrics.jsonl keeps the metrics

    def unsent_progress(self, attempt: int) -> list[TaskProgress]:
        """The event of its last report if none was written for it (once): every view of the
        run reaches the last step it reported."""
        if self.unsent is None:
            return []
        (step, at), self.unsent = self.unsent, None
        return [TaskProgress(attempt, task=self.name, step=step, metrics={}, first=False,
                             received_at=at)]

    def flush_progress(self, attempt: int, emit: Callable[[Event], None]) -> None:
        """Write the event of its last report if none was (at its exit)."""
        for event in self.unsent_progress(attempt):
            emit(event)

    def again(self) -> None:
        """Started again alone: what it reported before is forgotten."""
        self.to(TaskState.PENDING)
        self.pid = self.first_step = self.step = self.restore_failed = self.unsent = None
        self.saved_preemption = None
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

    def flush_progress(self, attempt: int, emit: Callable[[Event], None]) -> None:
        """Write the events of every task's last report not written yet (the attempt's end)."""
        for task in self:
            task.flush_progress(attempt, emit)

    def reached_step(self) -> int | None:
        """The step every training task had reached (:mod:`launcher.run.step_figures`)."""
        return reached_step({t.name: t.step for t in self if t.step is not None})

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
