"""The launch benchmark's table and verdict (``launch_overhead.py`` measures, ``run_all.py`` and
``launch_overhead.py`` print these)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from exit_detection import DetectionSample, detection_verdict
from targets import LAUNCH_N, LAUNCH_RATIO

if TYPE_CHECKING:
    from launch_overhead import SizeResult


def _seconds_and_ratio(part: float | None, bare: float) -> str:
    return "| - | - " if part is None else f"| {part:.3f} | {part / bare:.2f} "


def launch_table(results: Sequence[SizeResult], repeats: int, new_session: bool) -> list[str]:
    lines = [
        f"### Launch overhead (median of {repeats}; bare processes "
        f"{'each in its own session' if new_session else 'in one session'})",
        "",
        "| N | bare Popen loop (median s) | tfcluster to all running (median s) | ratio "
        "| tfcluster total (median s) | bare loop, CPUs at a time (median s) | its ratio "
        "| agent alone to all running (median s) | its ratio "
        "| least coordinator to all running (median s) | its ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        others = "".join(_seconds_and_ratio(part, r.bare_running)
                         for part in (r.paced_running, r.agent_running, r.least_running)) + "|"
        if r.tfcluster:
            partial = f" ({len(r.errors)} of {repeats} failed)" if r.errors else ""
            lines.append(f"| {r.n} | {r.bare_running:.3f} | {r.tf_running:.3f}{partial} "
                         f"| {r.ratio:.2f} | {r.tf_total:.3f} {others}")
        else:
            lines.append(f"| {r.n} | {r.bare_running:.3f} | FAILED ({len(r.errors)} of {repeats}) "
                         f"| - | - {others}")
    failed = [r for r in results if r.errors]
    if failed:
        lines.append("")
    for r in failed:
        for error in dict.fromkeys(r.errors):  # distinct reasons, in order
            times = r.errors.count(error)
            lines.append(f"- N={r.n}: failed{f' {times}x' if times > 1 else ''}: {error}")
    return lines


def launch_verdict(results: Sequence[SizeResult]) -> str:
    """The launch target, one line: measured in this run, or why not; with the paced bare loop
    beside it (how much of the figure is pacing)."""
    target = LAUNCH_RATIO
    at_target = [r for r in results if r.n == LAUNCH_N]
    if at_target and not at_target[0].tfcluster:
        return f"{target.what} {target.text}: FAIL (tfcluster could not start {LAUNCH_N} tasks)"
    if at_target:
        r = at_target[0]
        paced = "" if r.paced_running is None else \
            f" (bare loop, CPUs at a time: {r.paced_running / r.bare_running:.2f}x)"
        return f"{target.what} {target.text}: {r.ratio:.2f}x -> {target.verdict(r.ratio)}{paced}"
    return f"{target.what} {target.text}: not measured (N={LAUNCH_N} not in --sizes)"


def verdicts(results: Sequence[SizeResult], samples: Sequence[DetectionSample]) -> list[str]:
    lines = ["### Targets", "", f"- {launch_verdict(results)}"]
    if samples:
        lines.append(f"- {detection_verdict(samples)}")
    return lines
