"""``drill.png``: each task's step against wall time, one panel per scenario run, with the faults
(red), the detections (orange) and the restarts (grey) marked: a new attempt, or, in a job that
restarts its tasks one at a time, the tasks started again inside one (named). A task's line breaks
where it was started again, and passes through each fault's step at the fault; the job's final
step, when known, is marked where it ended (progress events come at most once a second, so the
last one is rarely the last step). matplotlib (Agg backend) is imported here only, and only when a
drill draws its picture."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from launcher.drill.session import ScenarioResult
from launcher.run.directory import EVENTS_FILE
from launcher.run.event_log import read_events
from launcher.run.events import EventType
from launcher.run.task_events import TaskRestarted
from worker.wire.safe_open import replace_file
from worker.wire.tfconfig import TaskId, TFConfigError, checkpoint_writer

Record = dict[str, Any]
Point = tuple[float, int]  # (ts, step)


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


def finished(events: Sequence[Record], tasks: Sequence[str]) -> tuple[str, float] | None:
    """The task that writes checkpoints among ``tasks`` (the chief, else worker 0) and when it
    last exited 0; None if it never did (the job's final step is then not its to show)."""
    try:
        writer = checkpoint_writer(TaskId.parse(t) for t in tasks)
    except TFConfigError:  # not a task of tfcluster's: nothing to say
        return None
    ended = None if writer is None else next(
        (float(e["ts"]) for e in reversed(events) if e["event"] == EventType.TASK_EXITED
         and e.get("task") == str(writer) and e.get("exit_code") == 0), None)
    return None if writer is None or ended is None else (str(writer), ended)


def _title(result: ScenarioResult) -> str:
    name = result.name if result.repeat == 0 else f"{result.name} #{result.repeat + 1}"
    figures = result.figures
    restarts = f"{figures.restarts} restart(s)"
    if result.restarts_tasks:
        restarts = f"{figures.task_restarts} task restart(s), {figures.restarts} job restart(s)"
    verdict = "drill passed" if result.passed else "drill FAILED"
    return (f"{name}: {figures.outcome}, {restarts}, result {result.verdict.check.value}; "
            f"{verdict}")


def draw(results: Sequence[ScenarioResult], path: Path) -> Path | None:
    """Write the picture; None (nothing written) when there is nothing to draw."""
    if not results:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(results), 1, figsize=(10, 2.8 * len(results) + 0.6),
                                squeeze=False)
    for ax, result in zip(axes[:, 0], results, strict=True):
        events_path = result.run_dir / EVENTS_FILE
        events = read_events(events_path, torn_ok=True) if events_path.exists() else []
        start = min((float(e["ts"]) for e in events), default=0.0)
        tasks = sorted({str(e["task"]) for e in events if e["event"] == EventType.TASK_PROGRESS})
        struck = [(f.injected_at, f.step) for f in result.figures.faults]
        for n, task in enumerate(tasks):
            for life, points in enumerate(lives(events, task, struck)):  # a line per process
                width = 1.0 + 2.5 * (len(tasks) - 1 - n) / max(1, len(tasks) - 1)
                ax.plot([p[0] - start for p in points], [p[1] for p in points], marker=".",
                        markersize=3, linewidth=width, color=f"C{n % 10}",  # lock-step lines
                        alpha=0.8,                                          # stay visible
                        label=task if life == 0 else None)
        for fault in result.figures.faults:
            ax.axvline(fault.injected_at - start, color="red", linewidth=1.5)
            ax.plot([fault.injected_at - start], [fault.step], "o", color="red", markersize=5)
            hurt = fault.hurt or "tfcluster"
            ax.annotate(f"{fault.fault} → {hurt} @ {fault.step}",
                        (fault.injected_at - start, 1), xycoords=("data", "axes fraction"),
                        xytext=(3, -12), textcoords="offset points", color="red", fontsize=8)
            if fault.detection_s is not None:
                ax.axvline(fault.injected_at + fault.detection_s - start, color="orange",
                           linestyle="--", linewidth=1)
        for e in events:
            if e["event"] == EventType.ATTEMPT_STARTED and int(e["attempt"]) > 0:
                ax.axvline(float(e["ts"]) - start, color="grey", linestyle=":", linewidth=1.2)
        for at, who in restarted_at(events):
            ax.axvline(at - start, color="grey", linestyle=":", linewidth=1.2)
            ax.annotate(f"{who} started again", (at - start, 0), xycoords=("data", "axes fraction"),
                        xytext=(3, 4), textcoords="offset points", color="dimgrey", fontsize=8)
        if result.verdict.steps is not None and (done := finished(events, tasks)) is not None:
            writer, ended = done
            last = lives(events, writer)[-1][-1]
            ax.plot([last[0] - start, ended - start], [last[1], result.verdict.steps], "--",
                    linewidth=1, color=f"C{tasks.index(writer) % 10}", alpha=0.8)
            ax.plot([ended - start], [result.verdict.steps], "x", color="black", markersize=6)
            ax.annotate(f"done at step {result.verdict.steps}", (ended - start,
                        result.verdict.steps), xytext=(-6, -4), textcoords="offset points",
                        ha="right", va="top", fontsize=8)
        ax.set_title(_title(result), fontsize=10)
        ax.set_ylabel("step")
        ax.grid(alpha=0.3)
        if tasks:
            ax.legend(loc="lower right", fontsize=8)
    restart = ("restart or tasks started again" if any(r.restarts_tasks for r in results)
               else "restart")
    axes[-1, 0].set_xlabel("seconds since the job started  (red: fault, at the step reached; "
                           f"orange dashed: detected; grey dotted: {restart})")
    figure.tight_layout()
    picture = io.BytesIO()
    figure.savefig(picture, dpi=100, format=path.suffix.lstrip(".") or "png")
    plt.close(figure)
    replace_file(path, picture.getvalue(), 0o644)  # never written through a planted symlink
    return path
