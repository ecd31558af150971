"""Warm starts for the agent: one pre-started interpreter per task of this host (a spare, see
:mod:`worker.agent.spares.pool`) that has already imported TensorFlow and the entrypoint's ``preload``
modules; the next attempt's task becomes that spare instead of starting cold.

The pool is filled once per attempt, when the attempt's first step is reported (so that the spares'
imports do not compete with the tasks' own start-up for the CPU), or a delay after the
attempt started for scripts that never report a step (``Launch.spare_fill_delay_s``,
``restart.spare_fill_delay_s`` in the spec). A task that finds no fitting spare starts
cold and says why (``Started.cold_reason``).
"""

from __future__ import annotations

import dataclasses
import selectors
import time
from dataclasses import dataclass

from worker.agent.notes import note
from worker.agent.spares.pool import Spare, SpareEvent, SpareLaunchError, SparePool
from worker.agent.spares.process import SpareState
from worker.agent.task_process import TaskProcess
from worker.wire.protocol import Launch, TaskLaunch

#: A task whose spare is still importing waits for it (finishing an import beats starting
#: one afresh) this long at most, then starts cold.
SPARE_WAIT_S = 60.0


@dataclass
class _Held:
    task: TaskProcess
    launch: Launch
    task_launch: TaskLaunch
    until: float  # time.monotonic()


class WarmStarts:
    """Spares for the tasks of the launches that ask for them (``Launch.preload`` not None)."""

    def __init__(self, selector: selectors.BaseSelector) -> None:
        self.pool = SparePool(selector)
        self._launch: Launch | None = None
        self._fill_at: float | None = None  # time.monotonic(); None: filled or not wanted
        self._failed: dict[str, str] = {}  # task -> why its last spare was lost
        self._held: dict[str, _Held] = {}  # tasks waiting for their spare to be ready
        self._settled: set[str] = set()  # tasks whose spare became ready or was lost
        self._ever_filled = False

    def start(self, task: TaskProcess, launch: Launch, task_launch: TaskLaunch
              ) -> tuple[bool, str | None]:
        """Start ``task``: from a spare if one fits (True, None), else cold (False, why). A
        cold start's SpawnError propagates as it does from ``TaskProcess.start``."""
        if launch.preload is None:
            task.start()
            return False, None
        whole = dataclasses.replace(task_launch, env=launch.task_env(task_launch))
        got = self.pool.take(whole)
        if isinstance(got, Spare):
            try:
                launched = self.pool.launch(got, whole)
            except SpareLaunchError as exc:
                task.start()
                return False, str(exc)
            task.adopt(launched.popen, launched.read_ends)
            return True, None
        task.start()
        if not self._ever_filled:  # the job's first attempt: no spare could exist yet
            return False, None
        return False, self._failed.pop(task_launch.task, got.reason)

    def hold(self, task: TaskProcess, launch: Launch, task_launch: TaskLaunch) -> bool:
        """Keep ``task`` back if its spare is still importing (True); :meth:`released` gives it
        back once the spare is ready or lost, or after :data:`SPARE_WAIT_S`."""
        spare = self.pool.spares.get(task_launch.task)
        if launch.preload is None or spare is None or spare.state is not SpareState.STARTING:
            return False
        self._held[task.task] = _Held(task, launch, task_launch, time.monotonic() + SPARE_WAIT_S)
        return True

    @property
    def holding(self) -> bool:
        """Whether a task waits for its spare."""
        return bool(self._held)

    def released(self, now: float) -> list[tuple[TaskProcess, Launch, TaskLaunch]]:
        """Held tasks to start now: their spare settled, or they waited long enough."""
        due = [name for name, held in self._held.items()
               if name in self._settled or now >= held.until]
        self._settled.clear()
        return [(h.task, h.launch, h.task_launch) for h in map(self._held.pop, due)]

    def drop_held(self) -> None:
        """The attempt is being torn down: held tasks are not started at all."""
        self._held.clear()

    def attempt_started(self, launch: Launch) -> None:
        self._launch = launch
        self._fill_at = None if launch.preload is None else \
            time.monotonic() + launch.spare_fill_delay_s

    def first_step(self) -> None:
        """A task of this attempt reported its first step: time to fill the pool."""
        if self._fill_at is not None:
            self._fill_at = time.monotonic()

    def due_at(self) -> float | None:
        times = [h.until for h in self._held.values()]
        if self._fill_at is not None:
            times.append(self._fill_at)
        return min(times) if times else None

    def tick(self, now: float) -> None:
        launch = self._launch
        if self._fill_at is None or now < self._fill_at or launch is None or \
                launch.preload is None:
            return
        self._fill_at = None
        tasks = [dataclasses.replace(t, env=launch.task_env(t)) for t in launch.tasks]
        self._failed.clear()
        self._ever_filled = True
        self._events(self.pool.fill(tasks, launch.preload))

    def on_readable(self, fd: int) -> None:
        self._events(self.pool.on_readable(fd))

    def _events(self, events: list[SpareEvent]) -> None:
        for event in events:
            note(f"spare {event.task}: {event.text}")
            if event.state in (SpareState.FAILED, SpareState.DISCARDED):
                self._failed[event.task] = event.text
            if event.state in (SpareState.READY, SpareState.FAILED, SpareState.DISCARDED):
                self._settled.add(event.task)

    def spares_rss_bytes(self) -> int:
        return sum(self.pool.usage().values())
