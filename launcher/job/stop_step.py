"""The job's stop step on a preemption notice, chosen by the coordinator (see
:mod:`worker.preemption` for the tasks' side).

A task whose helpers see a preemption notice (its ``SIGTERM``) after finishing step ``n`` says so
(a ``preemption_notice`` report) and holds there. The coordinator makes ``n + 1`` the job's stop
step and sends it to every other task through its agent (:class:`~worker.wire.protocol.StopAt`);
each task's helpers answer with a ``stop_ack`` as soon as they know it. Only when every other task
has answered is the step sent to the task that holds. That makes the step safe without a
collective per training step: the tasks of a lock-step job are never more than one step apart,
and none can finish step ``n + 1`` while the holding task has not started it, so every task
learns the step before it could train past it, and all stop after the same step.

Notices from several tasks are one preemption: the first one fixes the step, and every task that
holds gets it once all the others have answered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from launcher.plan.planner import TaskPlan
from worker.wire.protocol import StopAt, TaskReport
from worker.wire.reports import ReportKind
from worker.wire.tfconfig import CHIEF, PS, TRAINING_TYPES


def lock_step_hosts(tasks: Iterable[TaskPlan]) -> dict[str, str]:
    """The host of each task whose helpers stop together: the chief and workers of a
    MultiWorkerMirrored job (not an evaluator); the chief alone of a ParameterServerStrategy job
    (its workers and parameter servers run servers, no training loop)."""
    every = list(tasks)
    kinds = (CHIEF,) if any(t.task.type == PS for t in every) else TRAINING_TYPES
    return {str(t.task): t.host for t in every if t.task.type in kinds}


class StopStep:
    """One attempt's stop step among the tasks of ``hosts`` (task -> its host): :meth:`on_report`
    takes the tasks' notices and answers; ``send(host, message)`` sends to a host's agent; ``say``
    tells the console."""

    def __init__(self, hosts: Mapping[str, str], send: Callable[[str, StopAt], object],
                 say: Callable[[str], None]) -> None:
        self.hosts = dict(hosts)
        self.tasks = frozenset(hosts)
        self._send_to, self._say = send, say
        self.step: int | None = None
        self._unanswered: set[str] = set()  # told the step, not yet answered
        self._holding: set[str] = set()  # sent a notice, waiting for the step

    def on_report(self, message: TaskReport) -> bool:
        """Act on ``message`` if it is part of the stop protocol (True), else leave it (False)."""
        step = message.data.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            return message.kind in (ReportKind.PREEMPTION_NOTICE, ReportKind.STOP_ACK)
        if message.kind == ReportKind.PREEMPTION_NOTICE:
            self._notice(message.task, step)
        elif message.kind == ReportKind.STOP_ACK:
            self._unanswered.discard(message.task)
        else:
            return False
        self._release()
        return True

    def _notice(self, task: str, after: int) -> None:
        self._holding.add(task)
        if self.step is not None:
            return  # the step is chosen: this task gets it with the others that hold
        self.step = after + 1
        self._say(f"{task} got a preemption notice after step {after}: every task saves after "
                  f"step {self.step} and stops")
        self._unanswered = set(self.tasks - {task})
        for other in sorted(self._unanswered):
            self._send(other, StopAt(task=other, step=self.step))

    def _send(self, task: str, message: StopAt) -> None:
        self._send_to(self.hosts[task], message)

    def _release(self) -> None:
        if self.step is None or self._unanswered - self._holding:
            return
        for task in sorted(self._holding):
            self._send(task, StopAt(task=task, step=self.step))
        self._holding.clear()
