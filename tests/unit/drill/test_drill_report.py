"""The drill's report: one aligned Markdown table row per scenario run (several faults joined by
' / '), the problems named with their scenario, drill.json with every figure and the seed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launcher.drill.faults import parse_faults
from launcher.drill.figures import run_figures
from launcher.drill.injector import resolve
from launcher.drill.report import problems, table, write
from launcher.drill.session import ScenarioResult, judge
from launcher.drill.verdict import Baseline, compare

TASKS = {"chief:0": "localhost", "worker:1": "localhost"}


def ev(ts: float, event: str, **fields: Any) -> dict[str, Any]:
    return {"ts": ts, "event": event, **fields}


def result(repeat: int, *, injected: bool = True) -> ScenarioResult:
    events = [ev(0.0, "attempt_started", attempt=0)]
    if injected:
        events += [
            ev(1.0, "fault_injected", attempt=0, fault="kill:worker:1:at-step=5", action="kill",
               task="worker:1", tasks=["worker:1"], step=5),
            ev(1.2, "task_failed", task="worker:1", attempt=0, kind="signalled", observed_at=1.05),
            ev(2.05, "job_restarting", attempt=1),
            ev(2.1, "attempt_started", attempt=1, resume_step=4),
            ev(3.5, "task_progress", task="worker:1", step=5, attempt=1, first=True)]
    events.append(ev(4.0, "job_succeeded"))
    faults = parse_faults(["kill:worker:1:at-step=5"], "f", "t")
    outcome = ScenarioResult("kill", repeat, Path(f"/runs/kill-{repeat + 1}"), tuple(faults),
                             tuple(resolve(faults, TASKS, 0)), 0, run_figures(events),
                             compare("r", "r"))
    judge(outcome)
    return outcome


def test_the_table() -> None:
    assert table([result(0), result(1, injected=False)]) == [
        "| scenario | outcome          | detection | teardown | recovery | steps lost | restarts "
        "| result |",
        "|----------|------------------|-----------|----------|----------|------------|----------"
        "|--------|",
        "| kill     | succeeded        | 50 ms     | 1.00 s   | 2.50 s   | 1          | 1        "
        "| match  |",
        "| kill #2  | succeeded (FAIL) | -         | -        | -        | -          | 0        "
        "| match  |",
    ]
    assert problems([result(0), result(1, injected=False)]) == [
        "kill #2: kill:worker:1:at-step=5 was never injected (its trigger at-step=5 never came): "
        "a drill that hurt nothing proved nothing"]


def test_the_files(tmp_path: Path) -> None:
    write(tmp_path, [result(0)], seed=7, baseline=Baseline("r", 5), baseline_from=None,
          picture=tmp_path / "drill.png")
    data = json.loads((tmp_path / "drill.json").read_text())
    assert (data["seed"], data["passed"], data["baseline"]["result"]) == (7, True, "r")
    assert data["baseline"]["steps"] == 5
    scenario, = data["scenarios"]
    figures, = scenario["faults"]
    assert abs(figures["detection_s"] - 0.05) < 1e-9
    assert scenario["planned"] == [{"fault": "kill:worker:1:at-step=5", "tasks": ["worker:1"],
                                    "host": None, "trigger": "at-step=5"}]
    text = (tmp_path / "drill.md").read_text()
    assert "seed 7; baseline result: r (at step 5)" in text
    assert "| kill     | succeeded |" in text and "![steps against time](drill.png)" in text
    assert "`kill:worker:1:at-step=5` → worker:1 at step 5, detected as signalled (worker:1), " \
           "resumed at step 4" in text
