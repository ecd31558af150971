"""The one-fault drill report (detection latency, recovery time, steps lost, restarts, outcome)
computed from ``events.jsonl`` alone, as the benchmarks read it. Drills themselves (faults,
suites, verdicts, reports) are :mod:`launcher.drill`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from launcher.output.events import EventType


@dataclass(frozen=True)
class DrillReport:
    injected: dict[str, Any] | None
    detected: dict[str, Any] | None
    resumed: dict[str, Any] | None
    restarts: int
    outcome: str

    @property
    def detection_s(self) -> float | None:
        if self.injected is None or self.detected is None:
            return None
        return float(self.detected["observed_at"]) - float(self.injected["ts"])

    @property
    def recovery_s(self) -> float | None:
        if self.injected is None or self.resumed is None:
            return None
        return float(self.resumed["ts"]) - float(self.injected["ts"])

    @property
    def steps_lost(self) -> int | None:
        if self.injected is None or self.resumed is None:
            return None
        return max(0, int(self.injected["step"]) - (int(self.resumed["step"]) - 1))

    def lines(self) -> list[str]:
        def fmt(seconds: float | None) -> str:
            return "-" if seconds is None else f"{seconds * 1000:.1f} ms" if seconds < 1 \
                else f"{seconds:.2f} s"

        if self.injected is None:
            return ["drill: the fault was never injected (the task did not reach the step)"]
        fault = f"{self.injected['signal']} to {self.injected['task']} at step " \
                f"{self.injected['step']}"
        resume = "-" if self.resumed is None else f"step {self.resumed['step']}"
        return [
            f"drill report: {fault}",
            f"  detected as     {self.detected['kind'] if self.detected else '-'}"
            f" ({self.detected['task'] if self.detected else '-'})",
            f"  detection       {fmt(self.detection_s)}",
            f"  resumed at      {resume}",
            f"  steps lost      {'-' if self.steps_lost is None else self.steps_lost}",
            f"  recovery        {fmt(self.recovery_s)} (fault to first step after restart)",
            f"  restarts        {self.restarts}",
            f"  outcome         {self.outcome}",
        ]


def report(events: Sequence[dict[str, Any]]) -> DrillReport:
    injected = next((e for e in events if e["event"] == EventType.FAULT_INJECTED), None)
    detected = None
    resumed = None
    if injected is not None:
        detected = next((e for e in events if e["event"] == EventType.TASK_FAILED
                         and e["ts"] >= injected["ts"]), None)
        resumed = next((e for e in events if e["event"] == EventType.TASK_PROGRESS and e.get("first")
                        and e["attempt"] > injected["attempt"]), None)
    restarts = sum(1 for e in events if e["event"] == EventType.JOB_RESTARTING)
    final = next((e["event"] for e in reversed(events)
                  if e["event"] in (EventType.JOB_SUCCEEDED, EventType.JOB_FAILED)), "unfinished")
    return DrillReport(injected, detected, resumed, restarts, final.removeprefix("job_"))
