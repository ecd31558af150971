"""The preemption notices tfcluster saw, per attempt: the evidence that lets an exit with the
preemption code restart outside the budget although no newer checkpoint was found (see
:attr:`~launcher.run.outcome.AttemptResult.preemption_justified`).

A notice is either a task's own report (``worker`` helpers send a ``preempted`` report when the task
got its preemption signal: the attempt writes a :class:`~launcher.run.events.TaskPreempted`), or a
SIGTERM that tfcluster itself sent to a task (a drill's ``term`` fault: a
:class:`~launcher.run.events.FaultInjected` with SIGTERM). tfcluster's own SIGINT / SIGTERM ends the
job instead, so it never needs to justify a restart. The coordinator feeds every event of the job
through :meth:`PreemptionNotices.observe`, so this needs nothing from the attempt itself.
"""

from __future__ import annotations

import signal

from launcher.run.events import Event, FaultInjected, TaskPreempted

#: The signal a drill sends as a preemption notice.
NOTICE_SIGNAL = signal.SIGTERM.name


class PreemptionNotices:
    """The first preemption notice of each attempt, as a phrase for the restart reason."""

    def __init__(self) -> None:
        self._first: dict[int, str] = {}

    def observe(self, event: Event) -> None:
        """Note ``event`` if it is a preemption notice (any other event is ignored)."""
        if isinstance(event, TaskPreempted):
            self._first.setdefault(event.attempt, f"{event.task} reported a preemption")
        elif isinstance(event, FaultInjected) and event.signal == NOTICE_SIGNAL:
            self._first.setdefault(event.attempt, f"the drill sent {event.signal} to {event.task}")

    def of(self, attempt: int) -> str | None:
        """The first notice seen during ``attempt``, or None."""
        return self._first.get(attempt)
