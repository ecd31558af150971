"""``drill.png`` read at a glance: tasks whose lines coincide (a lock-step job) each visible, one time
axis for every panel, the faults, detections and restarts marked with labelled lines, and the lines
reaching the job's last step."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from launcher.drill.figures import run_figures
from launcher.drill.plot import draw
from launcher.drill.session import ScenarioResult
from launcher.drill.verdict import compare

TASKS = ("chief:0", "worker:0", "worker:1")


def ev(ts: float, event: str, **fields: Any) -> dict[str, Any]:
    return {"ts": ts, "event": event, **fields}


def started() -> list[dict[str, Any]]:
    """Attempt 0 with every task started."""
    return [ev(0.0, "job_started", tasks=list(TASKS)), ev(0.0, "attempt_started", attempt=0),
            *(ev(0.1, "task_started", attempt=0, task=t) for t in TASKS)]


def scenario(run_dir: Path, events: list[dict[str, Any]]) -> ScenarioResult:
    """A drill's run of ``events``, written to ``run_dir`` as the picture reads them."""
    run_dir.mkdir()
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return ScenarioResult(run_dir.name, 0, run_dir, (), (), 0, run_figures(events),
                          compare("r", "r"))


def lock_step_run(run_dir: Path, seconds: float) -> ScenarioResult:
    """Three tasks reporting the same steps at the same moments; worker:1 killed at step 30,
    the job restarted from step 20 and done at step 100 after ``seconds``."""
    events = started()
    events += [ev(1.0 + i, "task_progress", attempt=0, task=t, step=10 * (i + 1), first=i == 0)
               for i in range(3) for t in TASKS]
    events += [ev(3.5, "fault_injected", attempt=0, fault="kill:worker:1:at-step=30",
                  action="kill", task="worker:1", tasks=["worker:1"], step=30),
               ev(3.6, "task_failed", attempt=0, task="worker:1", kind="signalled",
                  observed_at=3.6),
               ev(3.8, "job_restarting", attempt=1),
               ev(4.0, "attempt_started", attempt=1, resume_step=20)]
    events += [ev(4.1, "task_started", attempt=1, task=t) for t in TASKS]
    ends = [4.5 + (seconds - 5.0) * i / 4 for i in range(5)]
    events += [ev(at, "task_progress", attempt=1, task=t, step=20 + 16 * (i + 1), first=i == 0)
               for i, at in enumerate(ends) for t in TASKS]
    events += [ev(seconds, "job_succeeded")]
    return scenario(run_dir, events)


@pytest.fixture
def results(tmp_path: Path) -> list[ScenarioResult]:
    return [lock_step_run(tmp_path / "short", 10.0), lock_step_run(tmp_path / "long", 30.0)]


@pytest.fixture
def figure(results: list[ScenarioResult], tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Figure]:
    """The figure ``draw`` wrote drill.png from (kept from its ``close``)."""
    import matplotlib.pyplot as plt

    drawn: list[Figure] = []
    monkeypatch.setattr(plt, "close", drawn.append)
    assert draw(results, tmp_path / "drill.png") == tmp_path / "drill.png"
    assert (tmp_path / "drill.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.undo()
    yield drawn[0]
    plt.close("all")


def test_tasks_that_coincide_are_each_drawn_visibly(figure: Figure) -> None:
    for ax in figure.axes:
        lines = [line for line in ax.get_lines() if line.get_label() in TASKS]
        assert sorted(str(line.get_label()) for line in lines) == sorted(TASKS)
        styles = {(str(line.get_linestyle()), str(line.get_marker())) for line in lines}
        assert len(styles) == len(TASKS)  # a dash pattern and a marker of its own
        # the same data, drawn at different heights on the page
        first_points = {tuple(line.get_transform().transform(line.get_xydata()[0]))
                        for line in lines}
        assert len(first_points) == len(TASKS)


def test_every_panel_shares_one_time_axis(figure: Figure) -> None:
    short, long = figure.axes[:2]
    assert short.get_shared_x_axes().joined(short, long)
    assert short.get_xlim() == long.get_xlim() and short.get_xlim()[1] >= 30.0


def test_faults_detections_and_restarts_are_labelled_lines(figure: Figure) -> None:
    for ax in figure.axes:
        legend = ax.get_legend()
        assert legend is not None
        assert {t.get_text() for t in legend.get_texts()} >= {"fault", "detected", "restart"}
        texts = " | ".join(t.get_text() for t in ax.texts)
        assert "kill:worker:1:at-step=30 → worker:1 at step 30" in texts
        assert "detected: signalled (worker:1)" in texts and "attempt 1 from step 20" in texts


def test_the_lines_reach_the_jobs_last_step(figure: Figure) -> None:
    for ax in figure.axes:
        lines = [line for line in ax.get_lines() if line.get_label() in TASKS]
        tasks_lines = [line for line in ax.get_lines()
                       if line.get_color() == lines[0].get_color()]
        assert max(max(line.get_ydata()) for line in tasks_lines) == 100
        assert "done at step 100" in [t.get_text() for t in ax.texts]
        assert ax.get_ylim()[1] > 100  # the panel holds it


def late_fault_run(run_dir: Path) -> ScenarioResult:
    """The fake trainer's drill with worker:1 killed at step 186 of 200, 0.5 s before the end:
    the fault, its detection and the restart crowd the panel's right edge, beside the end."""
    events = started()
    events += [ev(0.3 + i, "task_progress", attempt=0, task=t, step=1 + 46 * i, first=i == 0)
               for i in range(5) for t in TASKS]
    events += [ev(4.10, "fault_injected", attempt=0, fault="kill:worker:1:at-step=190",
                  action="kill", task="worker:1", tasks=["worker:1"], step=186),
               ev(4.13, "task_failed", attempt=0, task="worker:1", kind="signalled",
                  observed_at=4.13),
               ev(4.2, "job_restarting", attempt=1),
               ev(4.3, "attempt_started", attempt=1, resume_step=180)]
    events += [ev(4.35, "task_started", attempt=1, task=t) for t in TASKS]
    events += [ev(4.5, "task_progress", attempt=1, task=t, step=200, first=True) for t in TASKS]
    events += [ev(4.6, "job_succeeded")]
    return scenario(run_dir, events)


@pytest.mark.parametrize("late", [False, True], ids=["mid-run", "near-the-end"])
def test_every_label_is_readable_whole(tmp_path: Path, late: bool) -> None:
    """No label covers another, runs out of its panel or under the legend, wherever the fault
    falls (labels of marks in a panel's right part go on the left of their line)."""
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    from launcher.drill.plot import figure_of

    run = late_fault_run(tmp_path / "run") if late else lock_step_run(tmp_path / "run", 10.0)
    figure = figure_of([run])
    try:
        figure.canvas.draw()
        (ax,) = figure.axes
        legend = ax.get_legend()
        assert legend is not None
        # the text's own box (an annotation's extent takes in its leader line too)
        labels = [(t.get_text(), Text.get_window_extent(t)) for t in ax.texts]
        assert len(labels) == 4  # the fault, its detection, the restart, the end
        panel = ax.get_window_extent()
        for n, (text, box) in enumerate(labels):
            assert panel.x0 <= box.x0 and box.x1 <= panel.x1, f"{text!r} leaves its panel"
            assert not box.overlaps(legend.get_window_extent()), f"{text!r} under the legend"
            for other, other_box in labels[n + 1:]:
                assert not box.overlaps(other_box), f"{text!r} covers {other!r}"
    finally:
        plt.close(figure)
