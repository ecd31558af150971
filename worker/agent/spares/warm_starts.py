"""Warm starts for the agent: one pre-started interpreter per task of this host (a spare, see
:mod:`worker.agent.spares.pool`) that has already imported TensorFlow and the entrypoint's ``preload``
modules; the next attempt's task becomes that spare instead of starting cold.

The pool is filled once per attempt, as soon as training is seen to run, so that the spares'
imports do not compete with the tasks' own start-up for the CPU, whichever comes first:

- a task of the attempt reports its first step (``worker.report``);
- the coordinator says the attempt wrote its first checkpoint (:class:`~worker.wire.protocol.
  FillSpares`): a plain script that never reports;
- every task of this host is past its start-up: its main thread's demand for a CPU has settled
  (:mod:`worker.agent.spares.training_seen`);
- or, the last resort, a delay after the attempt started (``Launch.spare_fill_delay_s``,
  ``restart.spare_fill_delay_s`` in the spec).

A spare still importing when its attempt is torn down is kept if it is getting the CPU and
something says how long imports take (:mod:`worker.agent.spares.readiness`): it has less left to
do than a cold start, so its task waits for it (:meth:`WarmStarts.hold_until`: until it is ready,
or its expected rest has passed, when it is killed and the task starts cold). Any other spare still
importing is killed then (it would compete with the cold start for the CPU), and the task starts
cold at once, saying why (``Started.cold_reason``), as does any task that finds no fitting spare.
"""

from __future__ import annotations

import dataclasses
import selectors
import time

from worker.agent.notes import note
from worker.agent.spares.pool import Spare, SpareEvent, SpareLaunchError, SparePool
from worker.agent.spares.process import SpareState
from worker.agent.spares.readiness import Readiness
from worker.agent.spares.training_seen import StartupWatch
from worker.agent.task_process import TaskProcess
from worker.wire.protocol import Launch, TaskLaunch


class WarmStarts:
    """Spares for the tasks of the launches that ask for them (``Launch.preload`` not None)."""

    def __init__(self, selector: selectors.BaseSelector) -> None:
        self.pool = SparePool(selector)
        self._launch: Launch | None = None
        self._fill_at: float | None = None  # time.monotonic(); None: filled or not wanted
        self._failed: dict[str, str] = {}  # task -> why its last spare was lost
        self._ever_filled = False
        self._watch = StartupWatch()
        self._tasks: dict[str, TaskProcess] = {}  # the attempt's tasks started so far
        self._started_at = time.monotonic()  # the attempt's
        self._readiness = Readiness()
        self._holds: dict[str, float] = {}  # task -> until when it waits for its spare
        self._given_up: set[str] = set()  # tasks whose hold ran out: their spare is not waited for

    def start(self, task: TaskProcess, launch: Launch, task_launch: TaskLaunch
              ) -> tuple[bool, str | None]:
        """Start ``task``: from a spare if one fits (True, None), else cold (False, why). A
        cold start's SpawnError propagates as it does from ``TaskProcess.start``. A spare still
        importing is killed (the task does not wait for it)."""
        if launch.preload is None:
            task.start()
            return False, None
        whole = dataclasses.replace(task_launch, env=launch.task_env(task_launch))
        try:
            return self._start(task, whole)
        finally:
            if self._fill_at is not None:
                self._tasks[task.task] = task
                self._watch.started(task.task, task.pid, time.monotonic())

    def _start(self, task: TaskProcess, whole: TaskLaunch) -> tuple[bool, str | None]:
        got = self.pool.take(whole, wait=whole.task not in self._given_up)
        self._given_up.discard(whole.task)
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
        return False, self._failed.pop(whole.task, got.reason)

    def attempt_started(self, launch: Launch) -> None:
        self._launch = launch
        self._started_at = time.monotonic()
        self._tasks.clear()
        self._watch.clear()
        self._fill_at = None if launch.preload is None else \
            time.monotonic() + launch.spare_fill_delay_s

    def attempt_ending(self) -> None:
        """The attempt is being torn down: a spare still importing is killed now unless the next
        attempt's task will wait for it (see the module doc); else it would compete with the
        task's cold start."""
        launch = self._launch
        self._holds.clear()
        if launch is None or launch.preload is None:
            return
        for task in launch.tasks:
            spare = self.pool.spares.get(task.task)
            if spare is not None and spare.state is SpareState.STARTING \
                    and self.pool.nearly_ready(spare) is None \
                    and self._ready_in(spare, time.monotonic()) is None:
                got = self.pool.take(dataclasses.replace(task, env=launch.task_env(task)))
                if not isinstance(got, Spare):
                    self._failed[task.task] = got.reason
                    note(f"spare {task.task}: {got.reason}")

    def hold_until(self, name: str, now: float) -> float | None:
        """Until when the task ``name``, due to start, waits for its spare (still importing,
        getting the CPU, see the module doc); None: start it now (its spare is ready, or
        none is worth waiting for any longer)."""
        spare = self.pool.spares.get(name)
        if self._launch is None or self._launch.preload is None or spare is None \
                or spare.state is not SpareState.STARTING:
            self._holds.pop(name, None)
            return None
        if (until := self._holds.get(name)) is None:
            if self.pool.nearly_ready(spare) is not None:  # take() waits for it at once
                return None
            wait = self._ready_in(spare, now)
            if wait is None:
                return None
            until = self._holds[name] = now + wait
            note(f"spare {name}: waiting up to {wait:.1f}s for spare {spare.pid}, still importing")
        elif now >= until or not self._readiness.working(spare, now):
            del self._holds[name]
            self._given_up.add(name)
            return None
        return until

    def _ready_in(self, spare: Spare, now: float) -> float | None:
        importing = [s for s in self.pool.spares.values() if s.state is SpareState.STARTING]
        self._readiness.forget({s.pid for s in importing})
        return self._readiness.ready_in(spare, self.pool.expected_import_s, len(importing), now)

    def first_step(self) -> None:
        """A task of this attempt reported its first step: time to fill the pool."""
        self.fill_now("a step was reported")

    def fill_now(self, why: str) -> None:
        """Training is seen to run (``why``): fill the pool at the next :meth:`tick`."""
        if self._fill_at is not None:
            if self._fill_at > time.monotonic():
                note(f"spares: filling now: {why}")
            self._fill_at = time.monotonic()

    def due_at(self) -> float | None:
        """When to fill the pool, or the earliest end of a hold (a spare's ``ready`` wakes the
        agent before: it is readable on the spare's channel)."""
        times = list(self._holds.values())
        if self._fill_at is not None:
            times.append(min(self._fill_at, self._watch.next_at or self._fill_at))
        return min(times, default=None)

    def tick(self, now: float) -> None:
        launch = self._launch
        if self._fill_at is None or launch is None or launch.preload is None:
            return
        if now < self._fill_at:
            if self._watch.next_at is None or now < self._watch.next_at:
                return
            running = {t.pid for t in self._tasks.values() if t.running and t.pid}
            if not self._watch.look(now, running):
                return
            note("spares: filling now: every task past its start-up (CPU demand settled)")
        self._fill_at = None
        self._watch.clear()
        self._tasks.clear()
        since = now - self._started_at
        if since < launch.spare_fill_delay_s:  # training seen: the tasks imported within it
            self.pool.import_hint_s = since
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

    def spares_rss_bytes(self) -> int:
        return sum(self.pool.usage().values())
