"""The launch benchmark's table and verdict (``launch_overhead.py`` measures, ``run_all.py`` and
``launch_overhead.py`` print these)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from exit_detection import DetectionSample, detection_verdict
from targets import LAUNCH_END_TO_END, LAUNCH_N, LAUNCH_RATIO, Target

if TYPE_CHECKING:
    from launch_overhead import SizeResult

#: What the end-to-end columns and target measure (RESULTS.md says it under the launch section).
END_TO_END = ("\"End-to-end\" is the whole command, from `Popen` to its exit (start-up, the run "
              "directory, the agent's exit, `summary.json`), against the bare loop until every "
              "process it started has exited and been waited for.")


def _seconds_and_ratio(part: float | None, bare: float) -> str:
    return "| - | - " if part is None else f"| {part:.3f} | {part / bare:.2f} "


def launch_table(results: Sequence[SizeResult], repeats: int, new_session: bool) -> list[str]:
    lines = [
        f"### Launch overhead (median of {repeats}; bare processes "
        f"{'each in its own session' if new_session else 'in one session'})",
        "",
        "| N | bare Popen loop (median s) | tfcluster to all running (median s) | ratio "
        "| tfcluster total (median s) | bare loop total (median s) | end-to-end ratio "
        "| bare loop, CPUs at a time (median s) | its ratio "
        "| agent alone to all running (median s) | its ratio "
        "| least coordinator to all running (median s) | its ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        others = "".join(_seconds_and_ratio(part, r.bare_running)
                         for part in (r.paced_running, r.agent_running, r.least_running)) + "|"
        if r.tfcluster:
            partial = f" ({len(r.errors)} of {repeats} failed)" if r.errors else ""
            lines.append(f"| {r.n} | {r.bare_running:.3f} | {r.tf_running:.3f}{partial} "
                         f"| {r.ratio:.2f} | {r.tf_total:.3f} | {r.bare_total:.3f} "
                         f"| {r.end_to_end:.2f} {others}")
        else:
            lines.append(f"| {r.n} | {r.bare_running:.3f} | FAILED ({len(r.errors)} of {repeats}) "
                         f"| - | - | {r.bare_total:.3f} | - {others}")
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


def end_to_end_verdict(results: Sequence[SizeResult]) -> str:
    """The end-to-end target, one line: the whole ``tfcluster local`` command, start to exit."""
    target = LAUNCH_END_TO_END
    at_target = [r for r in results if r.n == LAUNCH_N]
    if at_target and not at_target[0].tfcluster:
        return f"{target.what} {target.text}: FAIL (tfcluster could not start {LAUNCH_N} tasks)"
    if at_target:
        r = at_target[0]
        return (f"{target.what} {target.text}: {r.end_to_end:.2f}x ({r.tf_total:.3f} s / "
                f"{r.bare_total:.3f} s) -> {target.verdict(r.end_to_end)}")
    return f"{target.what} {target.text}: not measured (N={LAUNCH_N} not in --sizes)"


def launch_ratios(results: Sequence[SizeResult]) -> list[tuple[Target, float | None]]:
    """The launch targets with their measured ratios (None: not measured at N=LAUNCH_N)."""
    at = [r for r in results if r.n == LAUNCH_N and r.tfcluster and r.bare]
    return [(LAUNCH_RATIO, at[0].ratio if at else None),
            (LAUNCH_END_TO_END, at[0].end_to_end if at else None)]


def launch_verdicts(results: Sequence[SizeResult]) -> list[str]:
    """The launch targets' lines: to all running, and the whole command."""
    return [launch_verdict(results), end_to_end_verdict(results)]


def verdicts(results: Sequence[SizeResult], samples: Sequence[DetectionSample]) -> list[str]:
    lines = ["### Targets", "", *(f"- {line}" for line in launch_verdicts(results))]
    if samples:
        lines.append(f"- {detection_verdict(samples)}")
    return lines
