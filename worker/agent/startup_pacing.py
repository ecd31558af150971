"""Start-up pacing: how many of an agent's tasks are in their start-up at once.

An interpreter's start is nearly all CPU. Started all at once on a host with fewer cores than
tasks, they take turns on the cores and evict each other from the caches, so that each start costs
more CPU and the last task runs later than if they had been started a few at a time: on a 2-core
machine the last of 64 trivial Python tasks ran after 0.89 s when a bare loop started them all at
once, after 0.77 s when it started them two at a time (``benchmarks/RESULTS.md``). Ray's raylet
paces its worker processes the same way (``maximum_startup_concurrency``: the node's CPUs).

A task started cold holds one of the host's start-up slots until the first of:

- it exits;
- it writes anything: a line of output, or a report (``worker.runtime.bootstrap`` reports ``ready`` just
  before the entrypoint's own code runs, so a Python entrypoint holds its slot for the
  interpreter's start only);
- it is seen asleep, waiting for an event rather than a CPU, or stopped (looked at
  :data:`FIRST_LOOK_S` after its start, then every :data:`POLL_S`, while tasks wait for a slot);
- :data:`HOLD_S` passed since it started.

Tasks waiting for a slot start in the order they were queued. ``startup_concurrency`` in the spec
sets the number of slots; by default it is the number of CPUs this process may run on, and ``0``
means no pacing at all. A warm start (:mod:`worker.agent.spares.warm_starts`) takes no slot: its interpreter
started long before.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from worker.wire.process_identity import read_stat

#: How long a task holds its start-up slot at most.
HOLD_S = 0.25
#: While tasks wait for a slot, a task holding one is first looked at this long after it started
#: (an interpreter's start takes longer; looking costs the CPU it needs), then every POLL_S.
FIRST_LOOK_S = 0.015
POLL_S = 0.01

Item = TypeVar("Item")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: a Slurm step's, a cgroup's cpuset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity on this platform
        return max(1, os.cpu_count() or 1)


def slots_for(startup_concurrency: int | None) -> int | None:
    """The number of start-up slots: the spec's ``startup_concurrency``, the usable CPUs when it
    is None, and no limit (None) when it is 0."""
    if startup_concurrency is None:
        return usable_cpus()
    return startup_concurrency or None


def is_busy(pid: int) -> bool:
    """Whether process ``pid`` is busy starting: running or waiting for a CPU (state ``R`` in
    ``/proc/PID/stat``), or in a short wait inside the kernel (``D``: an ``exec`` loading its
    program, a page read from disk). False once it sleeps waiting for an event, is stopped or
    has exited."""
    stat = read_stat(pid)
    return stat is not None and stat.state in ("R", "D")


@dataclass
class _Slot:
    pid: int | None  # None: admitted, not yet started
    until: float  # time.monotonic(): the slot is free again by then
    look_at: float  # time.monotonic(): when to look whether the task is still busy


class StartupPacer(Generic[Item]):
    """The start-up slots of one agent and the tasks waiting for one, by task name. One attempt
    at a time: :meth:`clear` before the next attempt's tasks are queued."""

    def __init__(self, slots: int | None, is_busy: Callable[[int], bool] = is_busy) -> None:
        self.slots = slots  # None: no limit
        self._is_busy = is_busy
        self._queue: deque[tuple[str, Item]] = deque()
        self._holding: dict[str, _Slot] = {}

    @property
    def waiting(self) -> int:
        """How many tasks wait for a slot."""
        return len(self._queue)

    def queue(self, name: str, item: Item) -> None:
        self._queue.append((name, item))

    def admit(self, now: float) -> list[tuple[str, Item]]:
        """The waiting tasks that may start now, in order, each holding a slot from now on: the
        caller starts them and calls :meth:`started` for each."""
        admitted: list[tuple[str, Item]] = []
        if self._queue and self.slots is not None and len(self._holding) >= self.slots:
            self._look(now)
        while self._queue and (self.slots is None or len(self._holding) < self.slots):
            name, item = self._queue.popleft()
            self._holding[name] = _Slot(None, now + HOLD_S, now + FIRST_LOOK_S)
            admitted.append((name, item))
        return admitted

    def started(self, name: str, pid: int | None, now: float | None = None) -> None:
        """The task admitted as ``name`` started cold as ``pid``; None: it started warm, or did not
        start at all, and needs no slot. ``now``: when its start returned, from which its hold
        and first look count (a start slowed down, by a loaded disk say, does not shorten its
        hold); without it they count from its admission."""
        slot = self._holding.get(name)
        if slot is None:
            return
        if pid is None:
            del self._holding[name]
            return
        slot.pid = pid
        if now is not None:
            slot.until, slot.look_at = now + HOLD_S, now + FIRST_LOOK_S

    def settled(self, name: str) -> None:
        """The task ``name`` wrote something or exited: its start-up is over."""
        self._holding.pop(name, None)

    def due_at(self, now: float) -> float | None:
        """When to look at the slots again (None: nothing waits for one)."""
        if not self._queue:
            return None
        if self.slots is None or len(self._holding) < self.slots:
            return now
        return min(min(slot.until, slot.look_at) for slot in self._holding.values())

    def clear(self) -> list[Item]:
        """Forget every slot and give back the tasks still waiting (they are not to start)."""
        dropped = [item for _, item in self._queue]
        self._queue.clear()
        self._holding.clear()
        return dropped

    def _look(self, now: float) -> None:
        """Free the slots of tasks whose start-up is over: held too long, or no longer busy."""
        for name, slot in list(self._holding.items()):
            if now >= slot.until:
                del self._holding[name]
            elif now >= slot.look_at:
                slot.look_at = now + POLL_S
                if slot.pid is not None and not self._is_busy(slot.pid):
                    del self._holding[name]
