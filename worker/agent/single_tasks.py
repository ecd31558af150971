"""One task stopped on its own while the others run on (a ParameterServerStrategy restart:
:class:`~worker.wire.protocol.StopTask`): SIGTERM (and SIGCONT, so a stopped task sees it) to
its process group now, SIGKILL once its grace is over unless it has exited by then. Its exit is
reaped and reported like any other; the whole attempt's :mod:`worker.agent.teardown` still ends
whatever of its tree left the group."""

from __future__ import annotations

import signal

from worker.agent.task_process import TaskProcess


class SingleStops:
    """The single-task stops under way, each with the moment its SIGKILL is due."""

    def __init__(self) -> None:
        self._kill_at: dict[str, tuple[TaskProcess, float]] = {}

    def begin(self, task: TaskProcess, grace_s: float, now: float) -> None:
        """TERM ``task`` now (if it still runs); KILL it ``grace_s`` from ``now``. A second
        request may bring the KILL forward, never push it back."""
        if not task.running:
            return
        deadline = now + max(grace_s, 0.0)
        if (under_way := self._kill_at.get(task.task)) is not None and under_way[0] is task:
            self._kill_at[task.task] = (task, min(deadline, under_way[1]))
            return
        task.signal_group(signal.SIGTERM)
        task.signal_group(signal.SIGCONT)
        self._kill_at[task.task] = (task, deadline)

    def step(self, now: float) -> None:
        """KILL the tasks whose grace is over; forget the ones that exited."""
        for name, (task, kill_at) in list(self._kill_at.items()):
            if not task.running:
                del self._kill_at[name]
            elif now >= kill_at:
                task.signal_group(signal.SIGKILL)
                del self._kill_at[name]

    def wake_at(self) -> float | None:
        """When :meth:`step` has a KILL due (None: no stop under way)."""
        return min((at for _, at in self._kill_at.values()), default=None)
