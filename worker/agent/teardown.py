"""Ending every task tree of one agent: SIGTERM, a grace period, SIGKILL, then making sure.

A teardown goes through these states, in this order only:

- *not started*: the tasks run;
- *terminating*: SIGTERM (and SIGCONT, so that stopped processes see it) went to every tree;
  SIGKILL is due at :attr:`Teardown.kill_at`. A later request may bring that moment forward,
  never push it back;
- *killed*: SIGKILL went to every tree;
- *done* (:attr:`Teardown.all_gone`), from either of the last two, once no task is left unreaped
  and no descendant of the agent is left. It is looked at every :data:`POLL_S` (each look reads
  every process's ``/proc`` entry), and :meth:`Teardown.step` says so once, for ``terminated``.

A tree is the process group of each task still unreaped, then every descendant of the agent,
each pinned before it is signalled: nothing that is not provably the agent's
(:mod:`worker.agent.process_tree`).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Collection

from worker.agent import process_tree
from worker.agent.task_process import TaskProcess

#: How often a teardown looks whether every process is gone.
POLL_S = 0.05


class Teardown:
    """The teardown of the tasks in ``tasks`` (the agent's own dict, which it keeps filling)."""

    def __init__(self, tasks: dict[str, TaskProcess],
                 kept: Callable[[], Collection[int]] = tuple) -> None:
        self._tasks = tasks
        self._kept = kept  # processes this teardown leaves alone: the warm spares
        self.kill_at: float | None = None  # set once terminating (time.monotonic())
        self.killed = False
        self.all_gone = False
        self._confirmed = False
        self._next_look = 0.0

    @property
    def started(self) -> bool:
        return self.kill_at is not None

    def poke(self) -> None:
        """A task was reaped: the next :meth:`step` looks whether all is gone at once."""
        self._next_look = 0.0

    def begin(self, grace_s: float, now: float) -> None:
        """TERM every tree now (on the first call); KILL what is left ``grace_s`` from ``now``."""
        deadline = now + max(grace_s, 0.0)
        if self.kill_at is not None and self.kill_at <= deadline:
            return
        first = self.kill_at is None
        self.kill_at = deadline
        if first:
            self._signal_trees(signal.SIGTERM)
            self._signal_trees(signal.SIGCONT)

    def step(self, now: float) -> bool:
        """Move on as time says (KILL when due, look whether all is gone); True exactly once,
        when everything is gone."""
        if self.kill_at is None:
            return False
        if not self.killed and now >= self.kill_at:
            self.killed = True
            self._signal_trees(signal.SIGKILL)
        if now >= self._next_look:
            self._next_look = now + POLL_S
            self.all_gone = (not any(task.running for task in self._tasks.values())
                             and not process_tree.own_descendants_but(self._kept()))
        if self.all_gone and not self._confirmed:
            self._confirmed = True
            return True
        return False

    def wake_at(self, now: float) -> float | None:
        """When :meth:`step` has something to do next; None before the teardown started."""
        if self.kill_at is None:
            return None
        return now + POLL_S if self.killed else min(self.kill_at, now + POLL_S)

    def _signal_trees(self, sig: signal.Signals) -> None:
        for task in self._tasks.values():
            task.signal_group(sig)
        process_tree.signal_descendants(sig, self._kept())
