"""When each task of an attempt starts: the agent's one place for that decision.

- every task waits for a start-up slot (:mod:`worker.agent.startup_pacing`), then starts from its
  warm spare if one is ready (:mod:`worker.agent.spares.warm_starts`), else cold; a task whose
  spare is still importing and getting the CPU is held until the spare is ready (or given up on:
  :meth:`~worker.agent.spares.warm_starts.WarmStarts.hold_until`). A task that starts from its
  spare, or is held, frees its slot at once: only a cold start holds one.

The agent starts what :meth:`TaskStarts.due` gives it, tells :meth:`TaskStarts.started` how each
start went, and :meth:`TaskStarts.settled` when a task wrote something or exited.
"""

from __future__ import annotations

import time

from worker.agent.spares.warm_starts import WarmStarts
from worker.agent.startup_pacing import StartupPacer, slots_for
from worker.agent.task_process import TaskProcess
from worker.wire.protocol import Launch, TaskLaunch

#: A task not yet started: the process to start, its attempt's launch, its own part of it.
Pending = tuple[TaskProcess, Launch, TaskLaunch]


class TaskStarts:
    """The tasks of the current attempt that have not started yet, and when they may."""

    def __init__(self, warm: WarmStarts) -> None:
        self.warm = warm
        self.pacer: StartupPacer[Pending] = StartupPacer(None)
        self.held: dict[str, Pending] = {}  # due, waiting for their spares

    @property
    def waiting(self) -> bool:
        """Whether a task of this attempt has yet to start."""
        return bool(self.pacer.waiting or self.held)

    def attempt(self, launch: Launch, tasks: list[tuple[TaskProcess, TaskLaunch]]) -> None:
        """The tasks of a new attempt, in launch order (the last attempt's are forgotten)."""
        self.warm.attempt_started(launch)
        self.pacer.clear()
        self.held.clear()
        self.pacer.slots = slots_for(launch.startup_concurrency)
        for task, task_launch in tasks:
            self.pacer.queue(task.task, (task, launch, task_launch))

    def one(self, task: TaskProcess, launch: Launch, task_launch: TaskLaunch) -> None:
        """One task of the current attempt, started again alone: from its spare if there is one,
        else cold when a start-up slot is free."""
        self.pacer.queue(task.task, (task, launch, task_launch))

    def due(self, now: float) -> list[Pending]:
        """The tasks to start now, in order."""
        ready = [pending for name, pending in list(self.held.items())
                 if self.warm.hold_until(name, now) is None]
        for task, _, _ in ready:
            del self.held[task.task]
        for name, pending in self.pacer.admit(now):
            if self.warm.hold_until(name, now) is None:
                ready.append(pending)
            else:
                self.held[name] = pending
                self.pacer.started(name, None)  # holds no slot, as a warm start
        return ready

    def started(self, task: TaskProcess, warm: bool) -> None:
        """A task :meth:`due` gave has been started (from a spare if ``warm``), or failed to start
        (its ``pid`` is None)."""
        self.pacer.started(task.task, None if warm else task.pid, time.monotonic())

    def settled(self, name: str) -> None:
        """The task ``name`` wrote something or exited: its start-up is over."""
        self.pacer.settled(name)

    def due_at(self, now: float) -> float | None:
        """When :meth:`due` may give more (None: nothing waits for a moment)."""
        times = [t for t in (self.warm.due_at(), self.pacer.due_at(now)) if t is not None]
        return min(times) if times else None

    def drop(self) -> None:
        """The attempt is being torn down: the tasks not started yet never start, and spares
        still importing are killed."""
        self.pacer.clear()
        self.held.clear()
        self.warm.attempt_ending()
