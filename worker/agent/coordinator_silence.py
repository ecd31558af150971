"""Whether the coordinator's silence means it is gone, or only stopped.

The coordinator pings every agent each heartbeat interval; an agent that hears nothing from it for
``Launch.coordinator_timeout_s`` (a partition that TCP has not noticed, a hung coordinator) ends
its tasks and exits, so that no task outlives a vanished coordinator. But a coordinator stopped by
Ctrl-Z (SIGTSTP), SIGSTOP or a debugger is silent and not gone: it will go on where it stopped
after ``fg`` (SIGCONT), and a job must survive a suspend it can survive.

An agent that shares a host with its coordinator is its child (the local engine starts it), so it
can see that state: ``/proc/PPID/stat`` says ``T`` (stopped) or ``t`` (stopped by a tracer). While
it does, the silence does not count; once the coordinator runs again it has a whole timeout to be
heard from. An agent reached over SSH or as a Slurm step cannot see the coordinator's state, so
the coordinator says it before Ctrl-Z stops it (a :class:`~worker.wire.protocol.Pause`): until it
is heard from again, only the end of its connection ends the tasks (the coordinator killed, or
its machine gone for TCP). A stop it cannot announce (SIGSTOP, a paused VM) is, for a remote agent,
a silence like a partition's (see docs/guides/failures.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from worker.wire.process_identity import read_stat

#: How often a stopped coordinator is looked at again.
RECHECK_S = 1.0
_STOPPED = ("T", "t")


def parent_stopped() -> bool:
    """Whether this process's parent is stopped (Ctrl-Z, SIGSTOP, a tracer)."""
    stat = read_stat(os.getppid())
    return stat is not None and stat.state in _STOPPED


class CoordinatorSilence:
    """The time the coordinator was last heard from, or last seen stopped (``time.monotonic()``)."""

    def __init__(self, now: float, note: Callable[[str], None]) -> None:
        self.heard_at = now
        self.stopped = False  # it was stopped when last looked at
        self.paused = False  # it said it was about to stop, and nothing since
        self._note = note

    def heard(self, now: float, *, paused: bool = False) -> None:
        if paused and not self.paused:
            self._note("the coordinator is being stopped (Ctrl-Z): its tasks go on until it runs "
                       "again or its connection ends")
        elif self.paused and not paused:
            self._note("the coordinator runs again")
        self.heard_at = now
        self.stopped = False
        self.paused = paused

    def gone(self, timeout_s: float | None, now: float) -> bool:
        """True once the coordinator has been silent for ``timeout_s`` (None: never) while it was
        not stopped."""
        if timeout_s is None or self.paused:
            return False
        if self.stopped or now >= self.heard_at + timeout_s:
            if parent_stopped():
                if not self.stopped:
                    self._note(f"no word from the coordinator for {now - self.heard_at:.0f}s, "
                               "but it is stopped (Ctrl-Z?), not gone: its tasks go on")
                self.stopped, self.heard_at = True, now
                return False
            if self.stopped:
                self._note("the coordinator runs again")
            self.stopped = False
        return now >= self.heard_at + timeout_s

    def wake_at(self, timeout_s: float | None) -> float | None:
        """When :meth:`gone` must be asked next (None: never)."""
        if timeout_s is None or self.paused:
            return None
        return self.heard_at + (min(timeout_s, RECHECK_S) if self.stopped else timeout_s)
