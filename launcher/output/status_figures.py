"""The figures ``tfcluster status`` shows under the attempts: per task (state, step, steps/s, CPU,
RSS, restarts alone), where a pool job's attempt ran, the slowest task, stragglers, memory
warnings and the metrics kept. Every figure comes from a file read back (``events.jsonl``,
``summary.json``) and is shown only if it is the number it should be; otherwise ``-``.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.run.record_fields import integer, mapping, number, text
from launcher.run.step_figures import AttemptSteps


@dataclass
class Attempt:
    """What ``status`` shows of one attempt, gathered from its events."""

    number: int
    started: float
    resume_step: int | None = None
    root_cause: dict[str, Any] | None = None
    steps: dict[str, int] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    health: Mapping[str, Any] | None = None
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)  # not recovered from
    restarts: dict[str, tuple[int, str]] = field(default_factory=dict)  # alone: count, why


def _size(size: object) -> str:
    value = integer(size)
    return "-" if value is None else f"{value / 2**20:.0f} MiB"


def _strings(value: object) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def placement_line(placed: Mapping[str, Any]) -> str:
    """Where a pool job's attempt ran: its size, each task's host, spares, hosts left out."""
    where = ", ".join(f"{task}@{host}" for task, host in mapping(placed.get("placement")).items())
    line = f"  {placed.get('workers')} of {placed.get('max_workers')} workers: {where}"
    if spares := _strings(placed.get("spares")):
        line += f"; spares {', '.join(spares)}"
    left = mapping(placed.get("left_out"))
    if left:
        line += "; left out " + ", ".join(f"{h} ({why})" for h, why in left.items())
    return line


def task_lines(attempt: Attempt, ended: Mapping[str, Any],
               ordered: Callable[[Iterable[str]], list[str]],
               steps: AttemptSteps | None = None) -> list[str]:
    """Per task: its step and steps/s from the attempt's ``steps`` (the events, as every view
    counts them: :mod:`launcher.run.step_figures`), CPU and RSS from the last ``job_health`` or,
    once the job ended, the summary's (mean CPU, peak RSS)."""
    figures = mapping((attempt.health or {}).get("tasks"))
    names = ordered([str(name) for name in {*attempt.states, *attempt.steps, *figures}])
    out = [f"tasks (attempt {attempt.number}):"] if names else []
    for name in names:
        one, final = mapping(figures.get(name)), mapping(ended.get(name))
        life = None if steps is None else steps.tasks.get(name)
        rate = number(final.get("steps_per_s")) if final else None
        if rate is None:  # running: from the events, fresher than the last job_health
            rate = life.rate if life is not None and life.rate is not None else \
                number(one.get("steps_per_s"))
        cpu = number(final.get("cpu_percent_mean", one.get("cpu_percent")))
        step = max([s for s in (attempt.steps.get(name), integer(one.get("step")),
                                integer(final.get("step"))) if s is not None], default=None)
        rss = final.get("peak_rss_bytes") if final else one.get("rss_bytes")
        out.append(f"  {name:<12} {attempt.states.get(name, 'pending'):<18} "
                   f"step {'-' if step is None else step:<8} "
                   f"{'-' if rate is None else f'{rate:.2f}'} steps/s  "
                   f"cpu {'-' if cpu is None else f'{cpu:.0f}%'}{' (mean)' if final else ''}  "
                   f"{'peak rss' if final else 'rss'} {_size(rss)}"
                   + _restarts(attempt.restarts.get(name)))
    return out


def _restarts(restarts: tuple[int, str] | None) -> str:
    """A task restarted alone (parameter_server): how often, and the last decision."""
    if restarts is None:
        return ""
    count, cause = restarts
    return f"  restarted {count}x (last: {cause})" if count else f"  (left out: {cause})"


def health_lines(run_dir: Path, last_health: Mapping[str, Any] | None, notes: list[str],
                 summary: Mapping[str, Any]) -> list[str]:
    """The slowest task, the straggler and memory ``notes``, the metrics kept, TensorBoard."""
    out = []
    health = mapping(summary.get("health"))
    slowest = text(health.get("slowest")) or text((last_health or {}).get("slowest"))
    if slowest:
        out.append(f"slowest task: {slowest}")
    out += notes
    metrics = mapping(summary.get("metrics"))
    reports = integer(metrics.get("reports"))
    if reports:
        dropped = sum(n for n in map(integer, mapping(metrics.get("dropped")).values())
                      if n is not None)
        out.append(f"metrics: {reports} reports in {metrics.get('file')} ({dropped} dropped)")
    events = mapping(summary.get("events"))
    left_out = {str(k): n for k, v in mapping(events.get("dropped")).items()
                if (n := integer(v))}
    if left_out:
        out.append(f"events: {sum(left_out.values())} not written to {events.get('file')} "
                   f"(it reached its {_size(events.get('max_bytes'))} bound: "
                   + ", ".join(f"{n} {kind}" for kind, n in sorted(left_out.items())) + ")")
    if (run_dir / "tensorboard").is_dir():
        # The coordinator's host needs no TensorFlow: say how to get TensorBoard where it is missing.
        there = shutil.which("tensorboard") or Path(sys.executable).with_name("tensorboard").exists()
        missing = "" if there else " (pip install tensorboard, or tfcluster[tf])"
        out.append(f"tensorboard: tensorboard --logdir {run_dir / 'tensorboard'}{missing}")
    return out
