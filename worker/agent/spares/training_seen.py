"""When an attempt's tasks on this host are past their start-up, seen from outside: the moment to
fill the warm spares, for scripts that never call ``worker.report`` too.

Spares import what the tasks imported (TensorFlow: seconds of a core each), so filling them while
the tasks still start would slow the attempt's own start. :class:`StartupWatch` looks, a few
times a second until it says yes, at every task of this host that has started: its main thread's
**demand for a CPU has settled** when the time it ran plus the time it waited for a CPU
(``/proc/PID/schedstat``, so that a task slowed by others still counts as busy), over the last
:data:`WINDOW_S`, is below :data:`SETTLED_DEMAND` of a core, after at least :data:`MIN_RUN_S`,
and **after a busy window** (its start-up work: imports, building and tracing the model).
While a task of the attempt has exited (the attempt is ending, or the task is to be started
again), none is: the others' quiet is their wait for it.
Imports run on the main thread (a core's worth of demand); a task waiting for its peers, its data
or its parameter servers does not. The spares are wanted once every task has settled. The busy
window first matters for a task started from a spare: it has imported already and first waits
for its peers (quiet, yet before its start-up work: seconds when a connection is retried), and
spares filled then made its first step seconds later.

A task's open cluster port (its TensorFlow server up) is no such sign: it comes right after the
imports, before the model is built and the first step traced, and spares filled then made the
attempt's first step seconds later (``benchmarks/early_kills.py``: a restart's recovery 1.7x the
cold one). The other signals (a reported step, the coordinator's word that a checkpoint appeared,
the launch's ``spare_fill_delay_s``) are :mod:`worker.agent.spares.warm_starts`'.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: How often the tasks are looked at while the spares wait.
SAMPLE_EVERY_S = 0.25
#: The demand is measured over this long.
WINDOW_S = 1.0
#: A task is looked at only after running this long.
MIN_RUN_S = 1.5
#: Settled: over the last window, the main thread ran or waited to run less than this (cores).
SETTLED_DEMAND = 0.5
_NS = 1e-9


def demand_seconds(pid: int) -> float | None:
    """How long the main thread of ``pid`` ran plus waited for a CPU so far, seconds."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as stat:
            fields = stat.read().split()
        return (int(fields[0]) + int(fields[1])) * _NS
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class _Task:
    pid: int
    started: float
    samples: list[tuple[float, float]] = field(default_factory=list)  # (now, demand seconds)
    busy: bool = False  # a window of start-up work was seen

    def settled(self, now: float, demand: float | None) -> bool:
        if demand is None:
            return False
        self.samples.append((now, demand))
        while len(self.samples) > 2 and self.samples[1][0] <= now - WINDOW_S:
            del self.samples[0]
        first_at, first = self.samples[0]
        if now - first_at < WINDOW_S * 0.75:
            return False
        if (demand - first) / (now - first_at) >= SETTLED_DEMAND:
            self.busy = True
            return False
        return self.busy and now - self.started >= MIN_RUN_S


class StartupWatch:
    """The tasks of one attempt on this host, and whether all are past their start-up."""

    def __init__(self) -> None:
        self._tasks: dict[str, _Task] = {}
        self.next_at: float | None = None  # time.monotonic(); None: nothing to watch

    def clear(self) -> None:
        self._tasks.clear()
        self.next_at = None

    def started(self, task: str, pid: int | None, now: float) -> None:
        """A task of the attempt started (``pid`` None: it could not be)."""
        if pid is None:
            return
        self._tasks[task] = _Task(pid, now)
        if self.next_at is None:
            self.next_at = now + SAMPLE_EVERY_S

    def look(self, now: float, running: set[int]) -> bool:
        """Whether every started task is ``running`` (pids) and past its start-up. One that
        exited says no: its attempt is ending, or it is to be started again, and the others'
        quiet is their wait for it (spares filled then would be discarded, or compete with its
        start)."""
        self.next_at = now + SAMPLE_EVERY_S
        tasks = list(self._tasks.values())
        if not tasks or any(task.pid not in running for task in tasks):
            return False
        waiting = 0
        for task in tasks:  # every one sampled: its demand needs a steady series
            if not task.settled(now, demand_seconds(task.pid)):
                waiting += 1
        return not waiting
