"""Noticing that the coordinator itself did not run: Ctrl-Z (SIGTSTP) then ``fg``, SIGSTOP then
SIGCONT, a paused VM, a machine starved of CPU.

The attempt's loop looks at its health deadlines at least every ``IDLE_WAKE_S``; when, by the
monotonic clock, far more time than that passed between two looks, the coordinator was not running
meanwhile, and the silence of the agents over that time is its own doing: their messages waited
in the pipes unread, and (for local agents, which can see the coordinator stopped) the tasks went
on. :class:`StallWatch` measures that time, and the health deadlines are moved on by as much
(:meth:`launcher.job.health.HealthMonitor.check`), so no host is lost and no task counted hung for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: A gap between two looks longer than the loop's longest sleep by more than this is a stall.
STALL_MARGIN_S = 2.0


class StallWatch:
    """Reads ``time.monotonic`` (also while this process is stopped, it goes on) at each look."""

    def __init__(self, longest_sleep_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._longest_sleep_s = longest_sleep_s
        self._monotonic = monotonic
        self._last: float | None = None

    def gap(self) -> float:
        """How long, since the last call, the coordinator did not run beyond its sleep (0.0 when
        it ran as expected, and at the first call)."""
        now = self._monotonic()
        last, self._last = self._last, now
        if last is None or now - last <= self._longest_sleep_s + STALL_MARGIN_S:
            return 0.0
        return now - last - self._longest_sleep_s
