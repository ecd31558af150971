"""Step rates and stragglers, from the steps tasks report and the times they arrived.

Under MultiWorkerMirroredStrategy every task waits for the slowest in each collective, so one slow
task slows the whole job; naming it is what a person can act on. What is compared is the step rate
each task *reports*: where tasks step in lock-step (MWMS's synchronous all-reduce) their reported
rates are equal and nothing is flagged; telling MWMS's slowest worker needs its compute time
outside the collectives, which is not measured here. A **straggler** is a task whose
step rate stays below ``ratio`` times the median rate of the other tasks for ``window_s`` seconds
(``health.straggler_ratio``, ``health.straggler_window_s``). Everything here is pure: the times come
in as arguments, so the rules are tested with scripted clocks.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

#: Steps/s are measured over about this many seconds of reports.
RATE_WINDOW_S = 5.0


class StepRate:
    """Steps per second of one task over the last :data:`RATE_WINDOW_S` (or ``window_s``).

    The rate runs up to *now*, not to the last report, so a task that stops reporting decays towards
    0 instead of keeping the rate it had. A step that goes backwards (a new attempt) starts over."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, ts: float, step: int) -> None:
        if self.samples and step < self.samples[-1][1]:
            self.samples.clear()
        self.samples.append((ts, step))

    def reset(self) -> None:
        self.samples.clear()

    @property
    def step(self) -> int | None:
        return self.samples[-1][1] if self.samples else None

    def rate(self, now: float) -> float | None:
        """Steps/s, or None until two reports span some time."""
        while len(self.samples) > 2 and self.samples[1][0] <= now - self.window_s:
            self.samples.popleft()
        if len(self.samples) < 2:
            return None
        (t0, s0), (_, s1) = self.samples[0], self.samples[-1]
        return (s1 - s0) / (now - t0) if now > t0 else None


@dataclass(frozen=True)
class StragglerChange:
    """A task became a straggler (``straggling``) or stopped being one."""

    task: str
    straggling: bool
    rate: float
    others_rate: float
    #: When its rate first fell below the threshold (this stretch).
    since: float


class StragglerDetector:
    """Flags a task once its rate has stayed below ``ratio`` x the others' median for ``window_s``;
    clears the flag when it catches up. Needs at least two tasks with a rate."""

    def __init__(self, ratio: float, window_s: float) -> None:
        self.ratio = ratio
        self.window_s = window_s
        self.slow_since: dict[str, float] = {}
        self.flagged: set[str] = set()

    def reset(self) -> None:
        self.slow_since.clear()
        self.flagged.clear()

    def update(self, rates: Mapping[str, float], now: float) -> list[StragglerChange]:
        changes: list[StragglerChange] = []
        for task in [t for t in self.slow_since if t not in rates]:  # exited, or no rate yet
            self.slow_since.pop(task)
            self.flagged.discard(task)
        if len(rates) < 2:
            return changes
        for task, rate in sorted(rates.items()):
            others = statistics.median(r for t, r in rates.items() if t != task)
            slow = others > 0 and rate < self.ratio * others
            if slow:
                since = self.slow_since.setdefault(task, now)
                if task not in self.flagged and now - since >= self.window_s:
                    self.flagged.add(task)
                    changes.append(StragglerChange(task, True, rate, others, since))
            elif task in self.slow_since:
                since = self.slow_since.pop(task)
                if task in self.flagged:
                    self.flagged.discard(task)
                    changes.append(StragglerChange(task, False, rate, others, since))
        return changes


#: The slowest task is named only when it is at least this much slower than the others' median:
#: MWMS tasks move in lock-step, and naming whichever was 0.1% slower would point at no one.
SLOWEST_MARGIN = 0.9


def slowest(rates: Mapping[str, float], margin: float = SLOWEST_MARGIN) -> str | None:
    """The task with the lowest rate (ties: first by name), when at least two have one and it is
    below ``margin`` times the others' median."""
    if len(rates) < 2:
        return None
    task = min(sorted(rates), key=lambda t: rates[t])
    others = statistics.median(r for t, r in rates.items() if t != task)
    return task if rates[task] < margin * others else None
