"""The recovery benchmark's results (:class:`Results`, the samples and errors of one workload and
variant) and the Markdown tables and lines ``recovery.py`` and ``report.py`` print from them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from common import median, percentile
from phases import ColdSample, DrillSample
from recovery_workloads import Workload
from targets import DETECTION_P95_MS


@dataclass
class Results:
    workload: Workload
    label: str
    drills: list[DrillSample] = field(default_factory=list)
    colds: list[ColdSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def secs(value: float) -> str:
    return f"{value:.4f}" if abs(value) < 0.01 else f"{value:.3f}" if abs(value) < 10 \
        else f"{value:.2f}"


def span(values: Sequence[float]) -> str:
    """``median [min-max]`` in seconds, ``-`` for no values."""
    return f"{secs(median(values))} [{secs(min(values))}-{secs(max(values))}]" if values else "-"


def detection_table(all_results: Sequence[Results], title: str | None = None) -> list[str]:
    lines = [
        title or "### Failure detection (SIGKILL of worker:1 by `tfcluster drill --fault kill`)",
        "",
        "| workload | metric | runs | p50 (ms) | p95 (ms) | max (ms) | target |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in all_results:
        if not r.drills:
            continue
        rows = (("`task_failed.detection_latency_ms` (agent saw the death -> coordinator recorded)",
                 [d.detection_ms for d in r.drills], True),
                ("end to end: `fault_injected.ts` (kill sent) -> `task_failed.observed_at`",
                 [d.end_to_end_ms for d in r.drills], False))
        for name, values, targeted in rows:
            p95 = percentile(values, 95)
            verdict = f"p95 {DETECTION_P95_MS.text}: {DETECTION_P95_MS.verdict(p95)}" \
                if targeted else ""
            lines.append(f"| {r.label} | {name} | {len(values)} | {median(values):.2f} "
                         f"| {p95:.2f} | {max(values):.2f} | {verdict} |")
    return lines


def recovery_table(all_results: Sequence[Results]) -> list[str]:
    lines = [
        "### Recovery vs cold start (seconds, median [min-max])",
        "",
        "| workload | drills | recovery: death -> first step after restart | ... every task "
        "stepping | steps lost | cold runs | cold start: Popen `tfcluster run` -> first step "
        "| cold start in the drills' attempt 0 | recovery / cold |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in all_results:
        d, c = r.drills, r.colds
        if not d and not c:
            continue
        recovery = [x.recovery_s for x in d]
        cold = [x.total_s for x in c]
        lost = sorted({x.steps_lost for x in d})
        ratio = f"{median(recovery) / median(cold):.2f}" if d and c else "-"
        lines.append(
            f"| {r.label} | {len(d)} | {span(recovery)} "
            f"| {span([x.recovery_all_s for x in d])} "
            f"| {'/'.join(map(str, lost)) or '-'} | {len(c)} | {span(cold)} "
            f"| {span([x.cold.total_s for x in d])} | {ratio} |")
    return lines


def phase_medians(drills: Sequence[DrillSample]) -> list[float | None]:
    """Medians of detect, stop, plan, spawn, import (None without timing files), first step."""
    imports = [d.restart.import_s for d in drills]
    return [median([d.detect_s for d in drills]), median([d.stop_s for d in drills]),
            median([d.plan_s for d in drills]), median([d.restart.spawn_s for d in drills]),
            None if any(i is None for i in imports) else median([i or 0.0 for i in imports]),
            median([d.restart.first_step_s for d in drills])]


def breakdown_table(all_results: Sequence[Results], level: str = "###") -> list[str]:
    lines = [
        f"{level} Where recovery time goes (seconds, median over the drills; death = "
        "`task_failed.died_at`)",
        "",
        "| workload | detect: death -> `task_failed.observed_at` | stop: -> last `task_exited` "
        "| plan: -> `attempt_started` (teardown confirmed, checkpoint lookup, policy, backoff) "
        "| spawn: -> every `task_started` | import: -> every task had imported its heavy module "
        "(interpreter start included) "
        "| first step: -> first `task_progress` (MWMS, restore, step) | sum of medians "
        "| recovery (median) | restarts with every task from a warm spare |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in all_results:
        d = r.drills
        if not d:
            continue
        parts = phase_medians(d)
        spares = [x.restart.warm for x in d]
        warm = "-" if None in spares else f"{sum(bool(x) for x in spares)} of {len(spares)}"
        lines.append(f"| {r.label} | " + " | ".join("-" if p is None else secs(p) for p in parts)
                     + f" | {secs(sum(p or 0.0 for p in parts))} "
                     f"| {secs(median([x.recovery_s for x in d]))} | {warm} |")
    return lines


def cold_table(all_results: Sequence[Results]) -> list[str]:
    lines = [
        "### Cold start breakdown (seconds, median; `tfcluster run`, no fault)",
        "",
        "| workload | runs | Popen -> `job_started` (coordinator start) | -> `attempt_started` "
        "| -> all tasks started (agent + spawn) | -> first step (task init) | total | every task "
        "stepping |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in all_results:
        c = r.colds
        if not c:
            continue
        lines.append(f"| {r.label} | {len(c)} | {secs(median([x.coordinator_s for x in c]))} "
                     f"| {secs(median([x.to_attempt_s for x in c]))} "
                     f"| {secs(median([x.start.spawn_s for x in c]))} "
                     f"| {secs(median([x.start.init_s for x in c]))} "
                     f"| {secs(median([x.total_s for x in c]))} "
                     f"| {secs(median([x.all_stepping_s for x in c]))} |")
    return lines


def setup_lines(all_results: Sequence[Results], backoff_s: float) -> list[str]:
    lines = ["### Setup", ""]
    for r in all_results:
        w = r.workload
        lines.append(f"- {r.label}: {w.title}, {w.steps} steps, chief checkpoints every "
                     f"{w.checkpoint_every}; drill kills {w.task} (SIGKILL) at step {w.at_step}; "
                     f"restart.max_restarts 1, restart.backoff_s {backoff_s:g} s, "
                     f"health.grace_period_s {w.grace_period_s:g}")
    lines.append(f"- restart backoff used: {backoff_s:g} s, set in the specs this benchmark writes "
                 "(the shipped cluster_specs use 1.0 s: add that to every recovery figure for them)")
    exits: dict[str, int] = {}
    for r in all_results:
        for d in r.drills:
            for text in d.stop_exits:
                key = f"{r.label} {text}"
                exits[key] = exits.get(key, 0) + 1
    if exits:
        lines.append("- how the surviving tasks of attempt 0 ended: "
                     + "; ".join(f"{k} ({n}x)" for k, n in sorted(exits.items())))
    return lines


def cold_reason_lines(all_results: Sequence[Results]) -> list[str]:
    """Why tasks started cold in the restarts (``task_started.cold_reason``), counted."""
    lines = []
    for r in all_results:
        reasons = [why for d in r.drills for why in d.restart.cold_reasons]
        for why in dict.fromkeys(reasons):
            lines.append(f"- {r.label}: {reasons.count(why)} task start(s) of a restart were cold: "
                         f"{why}")
    return lines


def error_lines(all_results: Sequence[Results]) -> list[str]:
    lines = []
    for r in all_results:
        for error in dict.fromkeys(r.errors):
            times = r.errors.count(error)
            lines.append(f"- {r.label}: failed run (not counted)"
                         f"{f' {times}x' if times > 1 else ''}: {error}")
    return lines
