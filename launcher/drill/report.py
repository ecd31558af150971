"""The drill's report in its run directory: ``drill.json`` (every figure, the seed, the faults as
injected) and ``drill.md`` (the table a person reads, also printed at the end)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from launcher.drill.figures import FaultFigures
from launcher.drill.session import ScenarioResult

COLUMNS = ("scenario", "outcome", "detection", "teardown", "recovery", "steps lost", "restarts",
           "result")


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    millis = round(value * 1000)
    return f"{millis} ms" if millis < 1000 else f"{value:.2f} s"


def _joined(values: Sequence[str]) -> str:
    return " / ".join(values) if values else "-"


def row(result: ScenarioResult) -> list[str]:
    faults = result.figures.faults
    name = result.name if result.repeat == 0 else f"{result.name} #{result.repeat + 1}"
    outcome = result.figures.outcome + ("" if result.passed else " (FAIL)")
    return [name, outcome,
            _joined([seconds(f.detection_s) for f in faults]),
            _joined([seconds(f.teardown_s) for f in faults]),
            _joined([seconds(f.recovery_s) for f in faults]),
            _joined(["-" if f.steps_lost is None else str(f.steps_lost) for f in faults]),
            str(result.figures.restarts), result.verdict.check.value]


def table(results: Sequence[ScenarioResult]) -> list[str]:
    """A Markdown table, one row per scenario run, aligned for a terminal too."""
    rows = [list(COLUMNS), *(row(r) for r in results)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
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


def _fault_line(f: FaultFigures) -> str:
    return (f"`{f.fault}` → {f.hurt or '-'} at step {f.step}"
            + (f", detected as {f.detected_as}" if f.detected_as else "")
            + (f", resumed at step {f.resume_step}" if f.resume_step is not None else "")
            + (f" ({f.detail})" if f.detail else ""))


def write(run_dir: Path, results: Sequence[ScenarioResult], *, seed: int,
          baseline: str | None, baseline_from: str | None, picture: Path | None) -> None:
    data: dict[str, Any] = {
        "seed": seed, "baseline": {"result": baseline, "run_dir": baseline_from},
        "passed": all(r.passed for r in results),
        "scenarios": [r.to_dict() for r in results],
        "picture": None if picture is None else str(picture),
    }
    (run_dir / "drill.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = ["# Drill report", "", f"seed {seed}; baseline result: {baseline or '-'}", "",
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
    (run_dir / "drill.md").write_text("\n".join(lines) + "\n")
