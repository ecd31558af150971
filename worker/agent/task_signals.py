"""What the coordinator asks an agent to tell its tasks: a named signal to one task or all
(:class:`~worker.wire.protocol.SignalTasks`; stack dumps are :mod:`worker.agent.stack_dumps`'),
and the job's stop step on a preemption notice, on one task's control pipe
(:class:`~worker.wire.protocol.StopAt`). Only a task's own process while it is unreaped is
signalled (:meth:`TaskProcess.send_signal`)."""

from __future__ import annotations

from collections.abc import Iterable

from worker.agent import process_tree
from worker.agent.task_process import TaskProcess
from worker.wire.control import encode_stop_at
from worker.wire.protocol import SignalTasks, StopAt


def signal_tasks(tasks: Iterable[TaskProcess], command: SignalTasks) -> str | None:
    """Send ``command``'s signal to its task (or every task); why not, for a bad signal name."""
    try:
        sig = process_tree.parse_signal(command.signal)
    except ValueError as exc:
        return str(exc)
    for task in tasks:
        if command.task in (None, task.task):
            task.send_signal(sig)
    return None


def tell_tasks(tasks: Iterable[TaskProcess], command: SignalTasks | StopAt) -> str | None:
    """Carry ``command`` out on this agent's ``tasks``; what went wrong, if anything did."""
    if isinstance(command, SignalTasks):
        return signal_tasks(tasks, command)
    for task in tasks:  # a task that is no longer running needs no stop step
        if task.task == command.task and task.running:
            return task.tell(encode_stop_at(command.step))
    return None
