"""Signals the coordinator asks an agent to send its tasks: a named signal to one task or all
(:class:`~worker.wire.protocol.SignalTasks`), and the stack-dump signal to every task that can
dump its Python stacks (:class:`~worker.wire.protocol.DumpStacks`). Only a task's own process
while it is unreaped is signalled (:meth:`TaskProcess.send_signal`)."""

from __future__ import annotations

import signal
from collections.abc import Iterable

from worker.agent import process_tree
from worker.agent.task_process import TaskProcess
from worker.wire.protocol import SignalTasks
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
