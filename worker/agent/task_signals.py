"""What the coordinator asks an agent to tell its tasks: a named signal to one task or all
(:class:`~worker.wire.protocol.SignalTasks`), the stack-dump signal to every task that can dump
its Python stacks (:class:`~worker.wire.protocol.DumpStacks`), and the job's stop step on a
preemption notice, on one task's control pipe (:class:`~worker.wire.protocol.StopAt`). Only a
task's own process while it is unreaped is signalled (:meth:`TaskProcess.send_signal`)."""

from __future__ import annotations

import signal
from collections.abc import Iterable

from worker.agent import process_tree
from worker.agent.task_process import TaskProcess
from worker.wire.control import encode_stop_at
from worker.wire.protocol import DumpStacks, SignalTasks, StopAt
from worker.wire.signals import STACK_DUMP_SIGNAL


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


def dump_stacks(tasks: Iterable[TaskProcess]) -> None:
    """Ask every task that supports it for its threads' Python stacks (into its stderr)."""
    for task in tasks:
        if task.stack_dumps:
            task.send_signal(signal.SIGCONT)  # a stopped task cannot dump
            task.send_signal(STACK_DUMP_SIGNAL)


def tell_tasks(tasks: Iterable[TaskProcess], command: SignalTasks | DumpStacks | StopAt) -> str | None:
    """Carry ``command`` out on this agent's ``tasks``; what went wrong, if anything did."""
    if isinstance(command, SignalTasks):
        return signal_tasks(tasks, command)
    if isinstance(command, DumpStacks):
        dump_stacks(tasks)
        return None
    for task in tasks:  # a task that is no longer running needs no stop step
        if task.task == command.task and task.running:
            return task.tell(encode_stop_at(command.step))
    return None
