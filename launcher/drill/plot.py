"""``drill.png``: each task's step against wall time, one panel per scenario run, every panel on the
same time axis (seconds since its job started). Tasks of a lock-step job report the same steps at
the same moments, so each task has its own colour, dash pattern and hollow marker, and is drawn
a point or two above the one before it: every task stays visible where their lines coincide.
Labelled vertical lines mark the faults (red, with the step the hurt task had reached), their
detections (orange, dashed) and the restarts (grey, dotted: a new attempt and the step it resumed
from, or, in a job that restarts its tasks one at a time, the tasks started again inside one). A
task's line breaks where it was started again, passes through each fault's step at the fault, and
ends at its last report: the last report before a task exits is always an event, so the lines
reach the job's last step, which is marked. matplotlib (Agg backend) is imported here only, and
only when a drill draws its picture."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.drill.session import ScenarioResult
from launcher.run.directory import EVENTS_FILE
from launcher.run.event_log import read_events
from launcher.run.events import EventType
from launcher.run.step_figures import run_steps
from launcher.run.task_events import TaskRestarted
from worker.wire.safe_open import replace_file

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Record = dict[str, Any]
Point = tuple[float, int]  # (ts, step)

#: Per task, in order: dash pattern, hollow marker, marker size, line width. Drawn in this order,
#: each narrower than the one before, so that a line on top never hides the one beneath.
TASK_STYLES = (("-", "o", 8.0, 3.0), ("--", "s", 6.0, 2.0), (":", "^", 5.0, 1.8),
               ("-.", "D", 4.0, 1.4), ((0, (5, 1, 1, 1, 1, 1)), "v", 4.0, 1.2))
#: Each task's line is drawn this many points above the one before it.
TASK_OFFSET_PT = 1.5
#: About this many markers per task line (at every report when there are fewer).
MARKERS_PER_LINE = 14


@dataclass(frozen=True)
class MarkKind:
    """A kind of vertical line: its colour, dash pattern and name in the legend."""

    color: str
    style: str
    label: str


FAULT = MarkKind("red", "-", "fault")
DETECTED = MarkKind("darkorange", "--", "detected")
RESTART = MarkKind("dimgrey", ":", "restart")


def lives(events: Sequence[Record], task: str,
          faults: Sequence[Point] = ()) -> list[list[Point]]:
    """``task``'s (ts, step) reports, one list per life: a new one at each of its starts (a new
    attempt, or a restart inside one), so that a line never joins two processes. Each fault (its
    time and the step reached) is a point of the life it struck, where it keeps the steps in
    order: progress events come at most once a second, and the line must reach the fault."""
    found: list[tuple[float, list[Point]]] = [(-math.inf, [])]
    for e in events:
        if e.get("task") != task:
            continue
        if e["event"] == EventType.TASK_STARTED:
            found.append((float(e["ts"]), []))
        elif e["event"] == EventType.TASK_PROGRESS:
            found[-1][1].append((float(e["ts"]), int(e["step"])))
    for at, step in faults:
        struck = [points for started, points in found if started <= at][-1]
        before = [p for p in struck if p[0] <= at]
        after = [p for p in struck if p[0] > at]
        if before and before[-1][1] <= step <= (after[0][1] if after else step):
            struck.insert(len(before), (at, step))
    return [points for _, points in found if points]


def restarted_at(events: Sequence[Record]) -> list[tuple[float, str]]:
    """When tasks restarted inside an attempt were back (their ``task_started``), and which."""
    back = []
    for restart in (e for e in events if e["event"] == TaskRestarted.TYPE):
        tasks = [str(restart["task"]), *(str(t) for t in restart.get("together") or ())]
        starts = [next((float(e["ts"]) for e in events if e["event"] == EventType.TASK_STARTED
                        and e.get("task") == task and e.get("attempt") == restart.get("attempt")
                        and float(e["ts"]) >= float(restart["ts"])), None) for task in tasks]
        if all(at is not None for at in starts):
            back.append((max(at for at in starts if at is not None), "+".join(tasks)))
    return back


def last_step(events: Sequence[Record]) -> Point | None:
    """The job's last step and when it was reached: the step its last attempt reached (as
    ``tfcluster status`` and ``summary.json`` count it), at its first report; for a last attempt
    that had nothing left to train, the step it resumed from, at the job's end."""
    attempts = run_steps(events).attempts
    if attempts and attempts[-1].reached is None and attempts[-1].resume_step is not None:
        return max(float(e["ts"]) for e in events), attempts[-1].resume_step
    last = next((a for a in reversed(attempts) if a.reached is not None), None)
    if last is None:
        return None
    return next(((float(e["ts"]), int(e["step"])) for e in events
                 if e["event"] == EventType.TASK_PROGRESS
                 and e.get("attempt") == last.number and e.get("step") == last.reached), None)


def _title(result: ScenarioResult) -> str:
    name = result.name if result.repeat == 0 else f"{result.name} #{result.repeat + 1}"
    figures = result.figures
    restarts = f"{figures.restarts} restart(s)"
    if result.restarts_tasks:
        restarts = f"{figures.task_restarts} task restart(s), {figures.restarts} job restart(s)"
    verdict = "drill passed" if result.passed else "drill FAILED"
    return (f"{name}: {figures.outcome}, {restarts}, result {result.verdict.check.value}; "
            f"{verdict}")


#: A mark's label goes on the left of its line past this fraction of the panel's time: on the
#: right it would run out of the panel, into the legend.
LABEL_LEFT_PAST = 0.55
#: Where the job's last step is named: this fraction of the panel's height, under the line (the
#: steps only grow, so nothing is drawn there at the end), linked to the point.
END_LABEL_HEIGHT = 0.3
_LABEL_BOX = {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none",
              "alpha": 0.8}


def _mark(ax: Axes, x: float, kind: MarkKind, text: str, height: float, *, left: bool) -> None:
    """A labelled vertical line: its kind in the legend, ``text`` beside it at ``height`` (a
    fraction of the panel's height), on its ``left`` or its right."""
    ax.axvline(x, color=kind.color, linestyle=kind.style, linewidth=1.4, label=kind.label,
               zorder=1)
    ax.annotate(text, (x, height), xycoords=("data", "axes fraction"),
                xytext=(-3 if left else 3, 0), textcoords="offset points", color=kind.color,
                fontsize=8, va="center", ha="right" if left else "left", zorder=20,
                bbox=_LABEL_BOX)


def _panel(ax: Axes, figure: Figure, result: ScenarioResult) -> float:
    """Draw one scenario run; the seconds it lasted."""
    from matplotlib.transforms import offset_copy

    events_path = result.run_dir / EVENTS_FILE
    events = read_events(events_path, torn_ok=True) if events_path.exists() else []
    start = min((float(e["ts"]) for e in events), default=0.0)
    tasks = sorted({str(e["task"]) for e in events if e["event"] == EventType.TASK_PROGRESS})
    struck = [(f.injected_at, f.step) for f in result.figures.faults]
    top = max((int(e["step"]) for e in events if e["event"] == EventType.TASK_PROGRESS), default=1)
    lasted = max((float(e["ts"]) for e in events), default=start) - start

    def mark(x: float, kind: MarkKind, text: str, height: float) -> None:
        _mark(ax, x, kind, text, height, left=x > LABEL_LEFT_PAST * lasted)

    # lines drawn a little lifted (not in data coordinates) do not size the panel: it is set here
    ax.set_ylim(-0.03 * top, 1.15 * top)
    for n, task in enumerate(tasks):
        dashes, marker, size, width = TASK_STYLES[n % len(TASK_STYLES)]
        lifted = offset_copy(ax.transData, fig=figure, y=n * TASK_OFFSET_PT, units="points")
        for life, points in enumerate(lives(events, task, struck)):  # a line per process
            every = max(1, len(points) // MARKERS_PER_LINE)
            ax.plot([p[0] - start for p in points], [p[1] for p in points], transform=lifted,
                    linestyle=dashes, linewidth=width, marker=marker, markersize=size,
                    markerfacecolor="none", markeredgewidth=1.2, color=f"C{n % 10}",
                    markevery=(n % every, every), zorder=2 + n,
                    label=task if life == 0 else None)
    for fault in result.figures.faults:
        at = fault.injected_at - start
        mark(at, FAULT, f"{fault.fault} → {fault.hurt or 'tfcluster'} at step {fault.step}",
             0.93)
        ax.plot([at], [fault.step], "o", color=FAULT.color, markersize=6, zorder=10)
        if fault.detection_s is not None:
            mark(at + fault.detection_s, DETECTED,
                 f"detected: {fault.detected_as} (+{fault.detection_s * 1000:.0f} ms)", 0.80)
    for e in events:
        if e["event"] == EventType.ATTEMPT_STARTED and int(e["attempt"]) > 0:
            resumed = e.get("resume_step")
            mark(float(e["ts"]) - start, RESTART, f"attempt {e['attempt']} from "
                 + ("the beginning" if resumed is None else f"step {resumed}"), 0.07)
    for at, who in restarted_at(events):
        mark(at - start, RESTART, f"{who} started again", 0.07)
    if (end := last_step(events)) is not None:
        ended = "done" if result.figures.outcome == "succeeded" else "ended"
        ax.plot([end[0] - start], [end[1]], "x", color="black", markersize=8, zorder=11)
        ax.annotate(f"{ended} at step {end[1]}", (end[0] - start, end[1]),
                    xytext=(end[0] - start, END_LABEL_HEIGHT), textcoords=("data", "axes fraction"),
                    ha="right", va="center", fontsize=8, zorder=20, bbox=_LABEL_BOX,
                    arrowprops={"arrowstyle": "-", "color": "dimgrey", "linewidth": 0.6,
                                "relpos": (1.0, 0.5), "shrinkA": 0, "shrinkB": 5})
    ax.set_title(_title(result), fontsize=10)
    ax.set_ylabel("step")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    kept = dict(zip(labels, handles, strict=True))  # one entry per kind of line
    if kept:
        ax.legend(kept.values(), kept.keys(), loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  fontsize=8, handlelength=3.2)
    return lasted


def figure_of(results: Sequence[ScenarioResult]) -> Figure:
    """The picture of ``results`` (at least one): a panel each, one time axis for all."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(results), 1, figsize=(12, 2.9 * len(results) + 0.7),
                                squeeze=False, sharex=True)
    lasted = [_panel(ax, figure, result)
              for ax, result in zip(axes[:, 0], results, strict=True)]
    axes[-1, 0].set_xlabel("seconds since the job started")
    axes[-1, 0].set_xlim(0, max(lasted, default=1.0) * 1.02 or 1.0)  # every panel: sharex
    figure.tight_layout()
    return figure


def draw(results: Sequence[ScenarioResult], path: Path) -> Path | None:
    """Write the picture; None (nothing written) when there is nothing to draw."""
    if not results:
        return None
    figure = figure_of(results)
    import matplotlib.pyplot as plt

    picture = io.BytesIO()
    figure.savefig(picture, dpi=100, format=path.suffix.lstrip(".") or "png")
    plt.close(figure)
    replace_file(path, picture.getvalue(), 0o644)  # never written through a planted symlink
    return path
