"""The drill's report in its run directory: ``drill.json`` (every figure, the seed, the faults as
injected) and ``drill.md`` (the table a person reads, also printed at the end).

A job that restarts its tasks one at a time (``parameter_server``) gets two restart columns, the
job's (whole attempts) and the tasks' (inside an attempt), and which tasks each fault restarted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from launcher.drill.figures import FaultFigures
from launcher.drill.session import ScenarioResult
from launcher.drill.task_recovery import CHIEF_TASK
from launcher.drill.verdict import Baseline
from worker.wire.safe_open import replace_file

COLUMNS = ("scenario", "outcome", "detection", "teardown", "recovery", "steps lost", "restarts",
           "result")
#: The columns of a job that restarts its tasks one at a time.
TASK_COLUMNS = ("scenario", "outcome", "detection", "teardown", "recovery", "steps lost",
                "job restarts", "task restarts", "restarted", "result")


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    millis = round(value * 1000)
    return f"{millis} ms" if millis < 1000 else f"{value:.2f} s"


def _joined(values: Sequence[str]) -> str:
    return " / ".join(values) if values else "-"


def row(result: ScenarioResult, tasks: bool = False) -> list[str]:
    """One scenario run's cells; ``tasks``: the columns of :data:`TASK_COLUMNS`."""
    faults = result.figures.faults
    name = result.name if result.repeat == 0 else f"{result.name} #{result.repeat + 1}"
    outcome = result.figures.outcome + ("" if result.passed else " (FAIL)")
    restarts = [str(result.figures.restarts)]
    if tasks:
        restarts += [str(result.figures.task_restarts),
                     _joined(["+".join(f.restarted) or "-" for f in faults])]
    return [name, outcome,
            _joined([seconds(f.detection_s) for f in faults]),
            _joined([seconds(f.teardown_s) for f in faults]),
            _joined([seconds(f.recovery_s) for f in faults]),
            _joined(["-" if f.steps_lost is None else str(f.steps_lost) for f in faults]),
            *restarts, result.verdict.check.value]


def table(results: Sequence[ScenarioResult]) -> list[str]:
    """A Markdown table, one row per scenario run, aligned for a terminal too."""
    tasks = any(r.restarts_tasks for r in results)
    columns = TASK_COLUMNS if tasks else COLUMNS
    rows = [list(columns), *(row(r, tasks) for r in results)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(columns))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
             for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return lines


def _title(result: ScenarioResult) -> str:
    return f"{result.name}{'' if result.repeat == 0 else f' #{result.repeat + 1}'}"


def problems(results: Sequence[ScenarioResult]) -> list[str]:
    return [f"{_title(r)}: {p}" for r in results for p in r.problems]


def notes(results: Sequence[ScenarioResult]) -> list[str]:
    """What a reader must know beside the table (the sizes of a job that changed size)."""
    return [f"{_title(r)}: {r.verdict.note}" for r in results if r.verdict.note]


def _restarted(f: FaultFigures) -> str:
    """What a fault restarted inside its attempt, for its line."""
    said = f", restarted {' and '.join(f.restarted)} in attempt {f.attempt}"
    if CHIEF_TASK not in f.restarted:
        return said + "; the chief trained on"
    stopped = "" if f.teardown_s is None else f" was stopped in {seconds(f.teardown_s)} and"
    resumed = " started from the beginning" if not f.resume_step else \
        f" resumed at step {f.resume_step}"
    return f"{said}; the chief{stopped}{resumed}"


def _fault_line(f: FaultFigures) -> str:
    return (f"`{f.fault}` → {f.hurt or '-'} at step {f.step}"
            + (f", detected as {f.detected_as}" if f.detected_as else "")
            + (_restarted(f) if f.restarted else
               f", resumed at step {f.resume_step}" if f.resume_step is not None else "")
            + (f" ({f.detail})" if f.detail else ""))


def _baseline_line(baseline: Baseline | None) -> str:
    if baseline is None:
        return "baseline result: -"
    steps = "" if baseline.steps is None else f" (at step {baseline.steps})"
    return f"baseline result: {baseline.result or '-'}{steps}"


def write(run_dir: Path, results: Sequence[ScenarioResult], *, seed: int,
          baseline: Baseline | None, baseline_from: str | None, picture: Path | None) -> None:
    data: dict[str, Any] = {
        "seed": seed, "baseline": {"result": None if baseline is None else baseline.result,
                                   "steps": None if baseline is None else baseline.steps,
                                   "run_dir": baseline_from},
        "passed": all(r.passed for r in results),
        "scenarios": [r.to_dict() for r in results],
        "picture": None if picture is None else str(picture),
    }
    replace_file(run_dir / "drill.json", (json.dumps(data, indent=2) + "\n").encode(), 0o644)
    lines = ["# Drill report", "", f"seed {seed}; {_baseline_line(baseline)}", "",
             *table(results), ""]
    for result in results:
        lines.append(f"- **{_title(result)}** ({result.run_dir.name}): "
                     + "; ".join(_fault_line(f) for f in result.figures.faults))
        if result.verdict.note:
            lines.append(f"  - {result.verdict.note}")
    if found := problems(results):
        lines += ["", "## Problems", "", *(f"- {p}" for p in found)]
    if picture is not None:
        lines += ["", f"![steps against time]({picture.name})"]
    replace_file(run_dir / "drill.md", ("\n".join(lines) + "\n").encode(), 0o644)
