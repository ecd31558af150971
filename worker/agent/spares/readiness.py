"""Whether a spare still importing is worth waiting for, and for how long.

A spare that is importing and getting the CPU (running, or its CPU time growing) has less left to do
than a cold start of the same task, which would import everything again: the task it is for waits
for it (:meth:`~worker.agent.spares.warm_starts.WarmStarts.hold_until`) instead of starting cold
beside it, until its ``ready`` arrives or its expected rest has passed with room to spare. A spare
that gets no CPU (stuck in a sleep, a lock, stopped) is not waited for at all.

Its expected rest is the CPU time imports took (the last ready spare's, else the attempt's start-up,
:attr:`SparePool.import_hint_s`) less the CPU time it has had, spread over the cores the spares
still importing share.
"""

from __future__ import annotations

import os

from worker.agent.spares.process import Spare, SpareState
from worker.wire.process_identity import read_stat

#: A spare's CPU time is compared with its last sample at least this much older.
SAMPLE_S = 0.1
#: A spare that got at least this share of a core since its last sample is working.
WORKING_SHARE = 0.1
#: The wait for a spare is its expected rest times this (other starts share the cores meanwhile),
#: plus :data:`MARGIN_S`.
SLACK = 1.5
MARGIN_S = 0.5


class Readiness:
    """The CPU samples of the spares still importing, and what they say."""

    def __init__(self) -> None:
        #: pid -> (time.monotonic(), CPU s, working) at the last look at least SAMPLE_S apart
        self._seen: dict[int, tuple[float, float, bool]] = {}

    def working(self, spare: Spare, now: float) -> bool:
        """``spare`` is importing and getting the CPU (not asleep, stuck or stopped)."""
        if spare.state is not SpareState.STARTING or not spare.alive():
            return False
        used = spare.cpu_s()
        stat = read_stat(spare.pid)
        if used is None or stat is None or stat.state in ("T", "t", "Z", "X"):
            return False
        running = stat.state in ("R", "D")
        last = self._seen.get(spare.pid)
        if last is not None and now - last[0] < SAMPLE_S:  # CPU time ticks every 10 ms
            return running or last[2]
        working = running or (last is not None and
                              (used - last[1]) / (now - last[0]) >= WORKING_SHARE)
        self._seen[spare.pid] = (now, used, working)
        return working

    def ready_in(self, spare: Spare, expected_s: float | None, importing: int,
                 now: float) -> float | None:
        """How long to wait for ``spare`` (``importing`` spares sharing the cores, imports
        expected to take ``expected_s`` of CPU); None: not worth it (not working, or nothing
        says how long imports take)."""
        if expected_s is None or not self.working(spare, now):
            return None
        left = max(expected_s - (spare.cpu_s() or 0.0), 0.0)
        share = min(1.0, (os.cpu_count() or 1) / max(importing, 1))
        return left / share * SLACK + MARGIN_S

    def forget(self, pids: set[int]) -> None:
        """Keep the samples of ``pids`` only (the spares still importing)."""
        self._seen = {pid: seen for pid, seen in self._seen.items() if pid in pids}
