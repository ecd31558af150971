"""The figures of a run's steps, defined once and read by every view (the console, the live table,
``tfcluster status``, ``summary.json``, TensorBoard, the drill's report and picture):

- **a task's step**: the last step it reported in its current life (the last report before it
  exits is always written as a ``task_progress`` event, so every view reaches it);
- **an attempt's step reached**: the step every training task had reached, the lowest of their
  last steps (tasks of a synchronous job step together: one that lags has not finished the others'
  step; an evaluator steps on its own and is left out);
- **a task's steps/s**: the steps it reported over its training time in the attempt, from its
  first report to its last (:func:`steps_per_s`), never over a gap after it stopped;
- **steps lost** by an attempt that was restarted: the steps it reached beyond the checkpoint
  the next attempt resumed from (:func:`steps_lost`);
- **an attempt's state** (:class:`AttemptState`).

The coordinator computes them as reports arrive (:class:`TaskSteps`, fed with the time each report
arrived); :class:`RunSteps` computes the same ones from ``events.jsonl``, whose progress events carry
that time (``received_at``), so both give the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from launcher.run.events import EventType
from worker.wire.tfconfig import EVALUATOR

Point = tuple[float, int]  # (time, step)


class AttemptState(str, Enum):
    """Where an attempt stands: ``running`` -> ``restarting`` (stopped, the next one not yet
    started) -> ``restarted`` (the next one started); or ``running`` -> ``succeeded`` /
    ``failed`` when the job ended with it."""

    RUNNING = "running"
    RESTARTING = "restarting"
    RESTARTED = "restarted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


#: Steps/s is kept to this many decimals, once, here: every view formats the same number (a view
#: rounding it again, e.g. to 2 decimals, gives the same digits as every other view).
RATE_DECIMALS = 3


def steps_per_s(first: Point | None, last: Point | None) -> float | None:
    """Steps per second from a task's first report of its life to its last (to
    ``RATE_DECIMALS``); None until two reports span some time."""
    if first is None or last is None or last[0] <= first[0]:
        return None
    return round((last[1] - first[1]) / (last[0] - first[0]), RATE_DECIMALS)


def reached_step(steps: Mapping[str, int]) -> int | None:
    """The step every training task had reached, from each task's last step (task -> step);
    None if none reported one."""
    training = [step for task, step in steps.items() if not task.startswith(f"{EVALUATOR}:")]
    return min(training) if training else None


def steps_lost(reached: int | None, resumed_from: int | None) -> int | None:
    """The steps an attempt reached beyond the checkpoint the next one resumed from (0 when it
    resumed from the beginning: ``resumed_from`` None); None if the attempt reported no step."""
    return None if reached is None else max(0, reached - (resumed_from or 0))


@dataclass
class TaskSteps:
    """One life of a task (a process): its first and last report."""

    first: Point | None = None
    last: Point | None = None

    def add(self, at: float, step: int) -> None:
        if self.first is None:
            self.first = (at, step)
        self.last = (at, step)

    @property
    def step(self) -> int | None:
        return None if self.last is None else self.last[1]

    @property
    def rate(self) -> float | None:
        return steps_per_s(self.first, self.last)


def job_rate(tasks: Iterable[TaskSteps]) -> float | None:
    """The job's steps/s: its slowest task's (every task of a lock-step job waits for it)."""
    rates = [rate for task in tasks if (rate := task.rate) is not None]
    return min(rates) if rates else None


@dataclass
class AttemptSteps:
    number: int
    resume_step: int | None = None
    state: AttemptState = AttemptState.RUNNING
    tasks: dict[str, TaskSteps] = field(default_factory=dict)  # each task's current life

    def progress(self, task: str, at: float, step: int) -> None:
        self.tasks.setdefault(task, TaskSteps()).add(at, step)

    @property
    def reached(self) -> int | None:
        """The step every training task had reached (:func:`reached_step`)."""
        return reached_step({name: step for name, life in self.tasks.items()
                             if (step := life.step) is not None})


@dataclass
class RunSteps:
    """The figures of :mod:`this module <launcher.run.step_figures>`, folded from a run's events
    (records as in ``events.jsonl``) one at a time."""

    attempts: list[AttemptSteps] = field(default_factory=list)

    def add(self, record: Mapping[str, Any]) -> None:
        kind = record.get("event")
        if kind == EventType.ATTEMPT_STARTED:
            if self.attempts and self.attempts[-1].state in (AttemptState.RUNNING,
                                                             AttemptState.RESTARTING):
                self.attempts[-1].state = AttemptState.RESTARTED
            step = record.get("resume_step")
            self.attempts.append(AttemptSteps(_whole(record.get("attempt"), len(self.attempts)),
                                              step if isinstance(step, int) else None))
        elif not self.attempts:
            return
        elif kind == EventType.TASK_PROGRESS and isinstance(step := record.get("step"), int):
            self.attempts[-1].progress(str(record.get("task")), arrived_at(record), step)
        elif kind == EventType.TASK_STARTED:  # a new process: a new life
            self.attempts[-1].tasks[str(record.get("task"))] = TaskSteps()
        elif kind == EventType.JOB_RESTARTING:
            self.attempts[-1].state = AttemptState.RESTARTING
        elif kind in (EventType.JOB_SUCCEEDED, EventType.JOB_FAILED):
            self.attempts[-1].state = (AttemptState.SUCCEEDED if kind == EventType.JOB_SUCCEEDED
                                       else AttemptState.FAILED)

    def attempt(self, number: int) -> AttemptSteps | None:
        return next((a for a in self.attempts if a.number == number), None)

    def lost(self, number: int) -> int | None:
        """The steps attempt ``number`` lost: None if no attempt followed it (or it reported no
        step)."""
        index = next((i for i, a in enumerate(self.attempts) if a.number == number), None)
        if index is None or index + 1 >= len(self.attempts):
            return None
        return steps_lost(self.attempts[index].reached, self.attempts[index + 1].resume_step)


def arrived_at(record: Mapping[str, Any]) -> float:
    """When a ``task_progress`` record's report arrived (its ``received_at``; ``ts`` in runs
    written before it was recorded)."""
    at = record.get("received_at")
    return float(at) if isinstance(at, int | float) else float(record["ts"])


def run_steps(records: Iterable[Mapping[str, Any]]) -> RunSteps:
    run = RunSteps()
    for record in records:
        run.add(record)
    return run


def _whole(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
