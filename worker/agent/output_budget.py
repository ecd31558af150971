"""How much of a task's output the agent relays: a token bucket per stream, and drop notices.

A task may write faster than anyone can read (a print in a tight loop easily makes 100 MB/s). The
agent still reads everything, so the task never blocks on a full pipe, but it relays a stream only
up to :data:`RATE_BYTES_S` sustained, with bursts of up to :data:`BURST_BYTES`; lines beyond that
are dropped and counted. Each line is charged its length plus :data:`LINE_COST_BYTES`, about what
one message costs on the wire, so a flood of empty lines is bounded too. What was dropped is told
in one notice line at most every :data:`NOTICE_INTERVAL_S`, and when the task exits.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.wire.protocol import Output

MIB = 1024 * 1024
RATE_BYTES_S = 1 * MIB
BURST_BYTES = 4 * MIB
LINE_COST_BYTES = 64
NOTICE_INTERVAL_S = 1.0
NOTICE_PREFIX = "[tfcluster] dropped"


def drop_notice(task: str, stream: str, *, source: str, lines: int, nbytes: int,
                why: str) -> Output:
    """The output line, on ``stream``, that stands in for lines dropped from ``source``."""
    return Output(task=task, stream=stream,
                  line=f"{NOTICE_PREFIX} {lines} lines ({nbytes} bytes) of {source}: {why}")


@dataclass(frozen=True)
class Dropped:
    lines: int
    nbytes: int


class OutputBudget:
    """One stream's token bucket. ``now`` is ``time.monotonic()``."""

    def __init__(self, now: float, rate_bytes_s: float = RATE_BYTES_S,
                 burst_bytes: float = BURST_BYTES) -> None:
        self.rate = rate_bytes_s
        self.burst = burst_bytes
        self._tokens = burst_bytes
        self._refilled_at = now
        self._dropped_lines = 0
        self._dropped_bytes = 0
        self._first_drop_at = 0.0

    def admit(self, nbytes: int, now: float) -> bool:
        """Whether a line of ``nbytes`` may be relayed; a refused one is counted as dropped."""
        self._tokens = min(self.burst, self._tokens + (now - self._refilled_at) * self.rate)
        self._refilled_at = now
        cost = nbytes + LINE_COST_BYTES
        if self._tokens >= cost:
            self._tokens -= cost
            return True
        if not self._dropped_lines:
            self._first_drop_at = now
        self._dropped_lines += 1
        self._dropped_bytes += nbytes
        return False

    def notice_due_at(self) -> float | None:
        """When the drops counted so far are to be told, or None if there are none."""
        return self._first_drop_at + NOTICE_INTERVAL_S if self._dropped_lines else None

    def take_dropped(self, now: float, force: bool = False) -> Dropped | None:
        """The drops to tell now (and forget), if any are due (``force``: at the task's exit)."""
        due = self.notice_due_at()
        if due is None or (now < due and not force):
            return None
        dropped = Dropped(self._dropped_lines, self._dropped_bytes)
        self._dropped_lines = self._dropped_bytes = 0
        return dropped
