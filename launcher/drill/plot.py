"""``drill.png``: each task's step against wall time, one panel per scenario run, with the faults
(red), the detections (orange) and the restarts (grey) marked. matplotlib (Agg backend) is imported
here only, and only when a drill draws its picture."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from launcher.drill.session import ScenarioResult
from launcher.run.directory import EVENTS_FILE
from launcher.run.event_log import read_events
from launcher.run.events import EventType


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
        for n, task in enumerate(tasks):
            mine = [e for e in events if e["event"] == EventType.TASK_PROGRESS
                    and e["task"] == task]
            for attempt in sorted({int(e["attempt"]) for e in mine}):  # a line per attempt
                points = [(float(e["ts"]) - start, int(e["step"])) for e in mine
                          if int(e["attempt"]) == attempt]
                width = 1.0 + 2.5 * (len(tasks) - 1 - n) / max(1, len(tasks) - 1)
                ax.plot([p[0] for p in points], [p[1] for p in points], marker=".",
                        markersize=3, linewidth=width, color=f"C{n % 10}",  # lock-step lines
                        alpha=0.8,                                          # stay visible
                        label=task if attempt == int(mine[0]["attempt"]) else None)
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
        title = result.name if result.repeat == 0 else f"{result.name} #{result.repeat + 1}"
        verdict = "drill passed" if result.passed else "drill FAILED"
        ax.set_title(f"{title}: {result.figures.outcome}, {result.figures.restarts} restart(s), "
                     f"result {result.verdict.check.value}; {verdict}", fontsize=10)
        ax.set_ylabel("step")
        ax.grid(alpha=0.3)
        if tasks:
            ax.legend(loc="lower right", fontsize=8)
    axes[-1, 0].set_xlabel("seconds since the job started  (red: fault, at the step reached; "
                           "orange dashed: detected; grey dotted: restart)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
