"""The task that holds a lock-step job back, and why: starved of CPU, or doing more work per step.

Under MultiWorkerMirroredStrategy every step ends in an all-reduce that waits for the slowest task,
so every task reports the same step rate and the rate names no one (:mod:`launcher.job.straggler`
does, for jobs that do not step together). What differs between the tasks is what they did between
two collectives, which the agents read from ``/proc`` at each heartbeat
(:mod:`worker.agent.cpu_time`):

- **run-queue wait**: the time its threads were runnable but waited for a CPU. Its *share*
  (wait / (CPU + wait)) is how much of the time it had work it could not run: a task on a host or a
  core crowded by other work waits, its peers (done early, asleep in the collective) do not.
- **CPU time**: a task with more work per step uses more CPU per second than its peers, which idle
  in the collective meanwhile; per second and per step are the same comparison in lock-step.

A task is named when, over the last :data:`WINDOW_S` seconds of heartbeats, its wait share is
above :data:`STARVED_SHARE` and its wait per CPU second :data:`STARVED_FACTOR` times the others'
median (``starved``), or its CPU per second is :data:`MORE_WORK_RATIO` times the others' median
(``more_work``), at two looks in a row; the name is cleared after two looks without. A balanced
job names no one: both rules compare a task with its peers on the same figures, so a host that is
slow for everyone flags nobody. Pure: times come in as arguments (scripted clocks in the tests).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

#: Figures are compared over this many seconds of heartbeats (at least half of it needed).
WINDOW_S = 10.0
#: Starved: waits for a CPU at least this share of the time it has work...
STARVED_SHARE = 0.5
#: ... and waits at least this many times as long per CPU second as the others' median. (A share
#: saturates near 1, so shares are compared as wait per CPU second: a TensorFlow task with a
#: CPU quota of a fifth of a core waited 0.93 of its time against 0.70 for its peers on this
#: 2-core host, i.e. 13 s per CPU second against 2.3; balanced tasks stayed within 1.6x.)
STARVED_FACTOR = 3.0
#: More work: uses at least this many times the others' median CPU per second...
MORE_WORK_RATIO = 1.5
#: Either needs a task busy with at least this much (cores: CPU, or CPU and wait for the
#: starved): below it, nobody does enough to compare.
MIN_CPU = 0.1
#: A verdict must hold at this many looks in a row to be named, and fail as many to be cleared.
LOOKS = 2


class Cause(str, Enum):
    STARVED = "starved"
    MORE_WORK = "more_work"


@dataclass(frozen=True)
class Figures:
    """One task over the window: CPU (cores: CPU seconds per second) and run-queue wait (seconds
    waited per second, all threads: two threads waiting the whole time make 2)."""

    cpu: float
    wait: float

    @property
    def wait_share(self) -> float:
        """How much of the time it had work it waited for a CPU."""
        return self.wait / (self.cpu + self.wait) if self.cpu + self.wait > 0 else 0.0

    @property
    def wait_per_cpu(self) -> float:
        """Seconds waited for a CPU per second of CPU had."""
        return self.wait / self.cpu if self.cpu > 0 else float("inf")

    @property
    def busy(self) -> float:
        """Cores it would have used had it never waited: CPU and run-queue wait per second."""
        return self.cpu + self.wait


class UsageWindow:
    """A task's cumulative CPU and wait seconds at each heartbeat, over the last ``window_s``."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self.samples: deque[tuple[float, float, float]] = deque()

    def add(self, at: float, cpu_s: float, wait_s: float) -> None:
        if self.samples and (cpu_s < self.samples[-1][1] or wait_s < self.samples[-1][2]):
            self.samples.clear()  # a new process
        self.samples.append((at, cpu_s, wait_s))
        while len(self.samples) > 2 and self.samples[1][0] <= at - self.window_s:
            self.samples.popleft()

    def reset(self) -> None:
        self.samples.clear()

    def figures(self) -> Figures | None:
        """Over the window, once it spans at least half of ``window_s``."""
        if len(self.samples) < 2:
            return None
        (t0, c0, w0), (t1, c1, w1) = self.samples[0], self.samples[-1]
        if t1 - t0 < self.window_s / 2:
            return None
        return Figures(cpu=(c1 - c0) / (t1 - t0), wait=(w1 - w0) / (t1 - t0))


@dataclass(frozen=True)
class Verdict:
    task: str
    cause: Cause
    figures: Figures
    #: The others' median figures.
    others: Figures

    def text(self, host: str, step_s: float | None = None) -> str:
        """One line a person can act on; ``step_s``: the job's seconds per step, if known."""
        if self.cause is Cause.STARVED:
            return (f"{self.task} on {host}: starved of CPU (waits for a core "
                    f"{self.figures.wait_share:.0%} of the time it has work, the others "
                    f"{self.others.wait_share:.0%}); every task waits for it in each all-reduce: "
                    "give it a less busy host or fewer tasks per host")
        ratio = self.figures.cpu / self.others.cpu
        per_step = "" if step_s is None else (
            f"; {self.figures.cpu * step_s * 1000:.0f} ms of CPU per step against "
            f"{self.others.cpu * step_s * 1000:.0f} ms")
        return (f"{self.task} on {host} does {ratio:.1f}x the others' work per step "
                f"({self.figures.cpu:.2f} CPU cores against {self.others.cpu:.2f}{per_step}); "
                "every task waits for it in each all-reduce: look at its input pipeline and "
                "what it does besides training")


def judge(figures: Mapping[str, Figures]) -> Verdict | None:
    """The task holding the others back now, if one clearly is (needs at least two tasks)."""
    if len(figures) < 2:
        return None
    found: list[Verdict] = []
    for task, mine in sorted(figures.items()):
        peers = [f for t, f in figures.items() if t != task]
        others = Figures(cpu=statistics.median(f.cpu for f in peers),
                         wait=statistics.median(f.wait for f in peers))
        # starved first: a task that cannot get the CPU it wants uses all it gets while its
        # peers idle in the collective, so it looks busier too (a CPU quota shows just that)
        if (mine.busy >= MIN_CPU and mine.wait_share >= STARVED_SHARE
                and mine.wait_per_cpu >= STARVED_FACTOR * statistics.median(
                    f.wait_per_cpu for f in peers)):
            found.append(Verdict(task, Cause.STARVED, mine, others))
        elif mine.cpu >= MIN_CPU and mine.cpu >= MORE_WORK_RATIO * max(others.cpu, MIN_CPU / 2):
            found.append(Verdict(task, Cause.MORE_WORK, mine, others))
    if len(found) != 1:
        return None  # none, or several: nothing one task explains
    return found[0]


class LockstepWatch:
    """Names the task holding a lock-step job back once :func:`judge` agreed :data:`LOOKS`
    times in a row, and clears it after as many looks without."""

    def __init__(self) -> None:
        self.named: Verdict | None = None
        self._streak: tuple[tuple[str, Cause] | None, int] = (None, 0)

    def reset(self) -> None:
        self.named, self._streak = None, (None, 0)

    def look(self, figures: Mapping[str, Figures]) -> tuple[Verdict | None, bool]:
        """The verdict in force after this look, and whether it changed."""
        verdict = judge(figures)
        key = None if verdict is None else (verdict.task, verdict.cause)
        seen, count = self._streak
        self._streak = (key, count + 1 if key == seen else 1)
        current = None if self.named is None else (self.named.task, self.named.cause)
        if key != current and self._streak[1] >= LOOKS:
            self.named = verdict
            return verdict, True
        if key == current and verdict is not None:
            self.named = verdict  # the latest figures
        return self.named, False
