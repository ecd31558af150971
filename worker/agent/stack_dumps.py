"""The stack dumps the coordinator asks for before it kills a hung attempt, and when they are done.

A task that supports them (its runtime registered :mod:`faulthandler` for
:data:`~worker.wire.signals.STACK_DUMP_SIGNAL`) is continued (a stopped task cannot dump) and
signalled. The dump is written by a C signal handler, so nothing in the task can say it is finished;
the kernel can: while the signal is pending it is in the process's (or a thread's) pending set, and
while the handler runs it is in the blocked set of the thread running it (the handler is installed
without ``SA_NODEFER``). A task's dump is done once neither is seen twice in a row
(:data:`POLL_S` apart: the kernel takes the signal off the pending set a moment before it blocks
it). The agent then answers :class:`~worker.wire.protocol.StacksDumped`, so the coordinator kills
the attempt as soon as every dump is in the logs instead of after a guess, and never in the middle
of one on a loaded machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field

from worker.agent.task_process import TaskProcess
from worker.wire.protocol import StacksDumped
from worker.wire.signals import STACK_DUMP_SIGNAL

#: A dump still going on after this long is given up on (the task is stuck in the kernel).
DUMP_DEADLINE_S = 4.0
#: How often a dump under way is looked at.
POLL_S = 0.01
_BIT = 1 << (STACK_DUMP_SIGNAL - 1)


def signal_sets(pid: int) -> dict[int, tuple[int, int]] | None:
    """Each thread's (pending, blocked) signal sets, the process's pending set in both; None
    when the process is gone or a zombie (what is pending then is never delivered)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    found: dict[int, tuple[int, int]] = {}
    for tid in threads:
        fields: dict[str, int] = {}
        with contextlib.suppress(OSError, ValueError), \
                open(f"/proc/{pid}/task/{tid}/status", encoding="ascii") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name == "State" and value.strip()[:1] in ("Z", "X"):
                    return None
                if name in ("SigPnd", "ShdPnd", "SigBlk"):
                    fields[name] = int(value.strip(), 16)
        if len(fields) == 3:
            found[int(tid)] = (fields["SigPnd"] | fields["ShdPnd"], fields["SigBlk"])
    return found


@dataclass
class _Dump:
    task: TaskProcess
    pid: int
    blocking: frozenset[int]  # threads that blocked the signal before it was sent
    quiet_polls: int = 0


@dataclass
class StackDumps:
    """The dumps under way on this agent (one request at a time; a second one joins it)."""

    _dumps: dict[str, _Dump] = field(default_factory=dict)
    _deadline: float | None = None
    _next_poll: float = 0.0

    def begin(self, tasks: Iterable[TaskProcess], now: float) -> None:
        """Ask every running task that supports it for its stacks."""
        for task in tasks:
            if not (task.stack_dumps and task.running and task.pid is not None):
                continue
            sets = signal_sets(task.pid) or {}
            self._dumps[task.task] = _Dump(task, task.pid, frozenset(
                tid for tid, (_, blocked) in sets.items() if blocked & _BIT))
            task.send_signal(signal.SIGCONT)  # a stopped task cannot dump
            task.send_signal(STACK_DUMP_SIGNAL)
        self._deadline = now + DUMP_DEADLINE_S
        self._next_poll = now + POLL_S

    def wake_at(self) -> float | None:
        return None if self._deadline is None else self._next_poll

    def step(self, now: float) -> StacksDumped | None:
        """The answer, once every dump is done (or the deadline passed); None before, and when
        nothing was asked."""
        if self._deadline is None or now < self._next_poll:
            return None
        self._next_poll = now + POLL_S
        for name, dump in list(self._dumps.items()):
            if self._finished(dump):
                del self._dumps[name]
        if self._dumps and now < self._deadline:
            return None
        self._deadline = None
        unfinished, self._dumps = sorted(self._dumps), {}
        return StacksDumped(unfinished=unfinished)

    @staticmethod
    def _finished(dump: _Dump) -> bool:
        sets = signal_sets(dump.pid) if dump.task.running else None  # reaped: its pid is not ours
        if sets is None:
            return True
        busy = any(pending & _BIT or (blocked & _BIT and tid not in dump.blocking)
                   for tid, (pending, blocked) in sets.items())
        dump.quiet_polls = 0 if busy else dump.quiet_polls + 1
        return dump.quiet_polls >= 2
