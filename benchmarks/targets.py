"""The figures tfcluster promises (issue 9), in one place. Every benchmark reports what it measured
against these, as the measured value, the limit and their ratio."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    what: str
    limit: float
    unit: str  # as printed after a value: "x", " s", " ms", "% of one core", " MiB"
    strict: bool = False  # the value must stay below the limit, not merely reach it
    at_least: bool = False  # the value must reach the limit (a floor, not a ceiling)

    @property
    def text(self) -> str:
        sign = "≥" if self.at_least else "<" if self.strict else "≤"
        return f"{sign} {self.limit:g}{self.unit}"

    def met(self, value: float) -> bool:
        if self.at_least:
            return value >= self.limit
        return value < self.limit if self.strict else value <= self.limit

    def verdict(self, value: float) -> str:
        return "PASS" if self.met(value) else "FAIL"

    def ratio(self, value: float) -> float:
        """How close ``value`` is to the limit, below 1 inside the target (1.0: exactly at it)."""
        return self.limit / value if self.at_least else value / self.limit


LAUNCH_N = 64
LAUNCH_RATIO = Target(f"launch of {LAUNCH_N} tasks: tfcluster to all running / bare Popen loop",
                      1.2, "x")
#: The whole command, from its start to its exit (start-up, the run directory, the agents' exit,
#: the summary), against a bare loop that starts the same processes and waits for them (issue 26).
LAUNCH_END_TO_END = Target(f"`tfcluster local -n {LAUNCH_N}` start to exit / bare Popen-and-wait "
                           "loop of the same tasks", 1.15, "x")
DETECTION_P95_MS = Target("failure detection p95 (`task_failed.detection_latency_ms`)", 50.0,
                          " ms", strict=True)
RESTART_S = Target("restart of a trivial 2-task job (backoff 0): death -> every task of the next "
                   "attempt started, median", 0.08, " s")
WARM_COLD_RATIO = Target("digits recovery (death -> first step after restart), warm spares / "
                         "cold, medians", 0.4, "x")
IDLE_N = 64
COORDINATOR_CPU_PCT = Target(f"coordinator CPU watching {IDLE_N} idle tasks", 2.0,
                             "% of one core", strict=True)
COORDINATOR_RSS_MIB = Target(f"coordinator RSS watching {IDLE_N} idle tasks", 100.0, " MiB",
                             strict=True)
HELPERS_RATIO = Target("digits steps/s with the worker helpers / the same example without them "
                       "(`--no-helpers`), median of the runs' ratios, round by round", 0.97, "x",
                       at_least=True)
EARLY_KILL_AT_S = 12.0
EARLY_KILL_RATIO = Target(f"plain MWMS script killed {EARLY_KILL_AT_S:g} s after its start: recovery "
                          "with warm spares / cold", 0.5, "x")
LATE_KILL_RATIO = Target(f"plain MWMS script killed later than {EARLY_KILL_AT_S:g} s: recovery with "
                         "warm spares / cold, worst moment", 0.35, "x")
#: "Never slower than cold": 1.1, not 1.0, because a kill before any spare could be filled is a
#: cold start in both runs, and runs of each differ by up to about 10% on this machine.
NEVER_SLOWER_RATIO = Target("plain MWMS script killed at any moment: recovery with warm spares / "
                            "cold, worst moment (medians of 2 runs each: 10% is noise)", 1.1, "x")
