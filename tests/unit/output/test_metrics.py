"""metrics.jsonl and the TensorBoard files: every report kept up to the cap (and the rest counted),
a restarted task one continuous curve, read back with TensorBoard's own reader."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from launcher.output.metrics import JobFigures, MetricsSink, Report
from tests.support.tensorboard_files import scalars as series


def test_reports_go_to_jsonl_and_one_tensorboard_run_per_task(tmp_path: Path) -> None:
    sink = MetricsSink(tmp_path)
    for step in range(1, 11):  # attempt 0 runs to step 10; the checkpoint was at step 6
        for task in ("chief:0", "worker:1"):
            sink.report(Report(ts=float(step), attempt=0, task=task, step=step,
                               metrics={"loss": 1.0 / step, "note": "text is kept, not plotted"}))
    for step in range(7, 13):  # attempt 1 resumes at 6
        for task in ("chief:0", "worker:1"):
            sink.report(Report(ts=100.0 + step, attempt=1, task=task, step=step,
                               metrics={"loss": 2.0 / step}, restart=step == 7))
    sink.job(JobFigures(ts=5.0, step=5, values={"steps_per_s": 3.5}))
    summary = sink.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == summary["reports"] == 32
    assert lines[0] == {"ts": 1.0, "attempt": 0, "task": "chief:0", "step": 1,
                        "metrics": {"loss": 1.0, "note": "text is kept, not plotted"}}
    assert summary["dropped"] == {"queue_full": 0, "size_cap": 0, "write_error": 0,
                                  "bad_value": 0, "metrics_over_size": 0, "replaced": 0}
    assert summary["dropped_why"] == []
    board = tmp_path / "tensorboard"
    assert sorted(p.name for p in board.iterdir()) == ["chief-0", "job", "worker-1"]
    for run in ("chief-0", "worker-1"):
        points = series(board / run, "loss")
        # one curve: attempt 0's steps up to the resume point, then attempt 1's
        assert [s for s, _ in points] == list(range(1, 13))
        assert points[5][1] == pytest.approx(1.0 / 6) and points[6][1] == pytest.approx(2.0 / 7)
    assert series(board / "job", "steps_per_s") == [(5, 3.5)]


def test_past_the_size_cap_reports_are_dropped_and_counted(tmp_path: Path) -> None:
    sink = MetricsSink(tmp_path, max_bytes=1000)
    for step in range(100):
        sink.report(Report(ts=0.0, attempt=0, task="worker:0", step=step, metrics={"loss": 0.5}))
    summary = sink.close()
    assert (tmp_path / "metrics.jsonl").stat().st_size <= 1000
    assert summary["reports"] + summary["dropped"]["size_cap"] == 100
    assert summary["dropped"]["size_cap"] > 0


def test_a_full_queue_drops_instead_of_blocking(tmp_path: Path) -> None:
    sink = MetricsSink(tmp_path, queue_size=1)
    for step in range(2000):
        sink.report(Report(ts=0.0, attempt=0, task="worker:0", step=step))
    summary = sink.close()
    assert summary["reports"] + summary["dropped"]["queue_full"] == 2000


def test_nothing_reported_writes_nothing(tmp_path: Path) -> None:
    summary = MetricsSink(tmp_path).close()
    assert summary["file"] is None and summary["tensorboard"] is None
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_run_dir_is_said_once_and_the_job_goes_on(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    said: list[str] = []
    sink = MetricsSink(blocker / "run", warn=said.append)  # its parent is a file
    for step in range(5):
        sink.report(Report(ts=0.0, attempt=0, task="worker:0", step=step, metrics={"loss": 1.0}))
    summary = sink.close()
    assert summary["reports"] == 0 and summary["dropped"]["write_error"] == 5
    assert len(said) == 1 and "cannot write the metrics" in said[0]


def test_reading_the_files_back_needs_no_tensorflow() -> None:
    assert "tensorflow" not in sys.modules
