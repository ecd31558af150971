"""Where the job loop meets time, threads and ports (:class:`LoopSeams`): the real ones by default;
the tests' simulated world (``tests/support/fake_backend.py``) replaces them, so that a minute of
job runs in a millisecond, in one thread."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from launcher.job.agents import Spawn, in_thread
from launcher.job.inbox import Clock, Inbox, InboxItem
from launcher.plan.ports import PortAllocator


def simple_queue() -> Inbox:
    inbox: queue.SimpleQueue[InboxItem] = queue.SimpleQueue()
    return inbox


@dataclass
class LoopSeams:
    #: What time it is (epoch seconds).
    clock: Clock = time.time
    #: A new inbox (one per attempt).
    new_inbox: Callable[[], Inbox] = simple_queue
    #: How an agent's start runs beside the loop (a thread).
    spawn: Spawn = in_thread
    #: Where the run's ports come from.
    ports: PortAllocator = field(default_factory=PortAllocator)
