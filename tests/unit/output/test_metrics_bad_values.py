"""The metrics writer never dies of one bad report (issue 25, item 6): a step TensorBoard cannot
store, a number too large for a float, a step that is no number at all: that report is dropped,
counted in the summary with the reason, said once, and every later report of every task is kept.
Metrics a task left out of a report too wide to send are counted too (item 5)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from launcher.output.metrics import MetricsSink, Report
from tests.support.tensorboard_files import scalars as series

pytestmark = pytest.mark.timeout(60)


def lines(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("step", [2**70, -1, "7", 2.5, None, True])
def test_a_bad_step_is_dropped_counted_and_later_reports_are_kept(step: Any,
                                                                   tmp_path: Path) -> None:
    said: list[str] = []
    sink = MetricsSink(tmp_path, warn=said.append)
    sink.report(Report(ts=1.0, attempt=0, task="worker:0", step=1, metrics={"loss": 1.0}))
    sink.report(Report(ts=2.0, attempt=0, task="worker:0", step=step, metrics={"loss": 0.9}))
    sink.report(Report(ts=2.5, attempt=0, task="worker:1", step=step, metrics={"loss": 0.9}))
    for n in range(2, 5):
        sink.report(Report(ts=2.0 + n, attempt=0, task="worker:1", step=n,
                           metrics={"loss": 1.0 / n}))
    summary = sink.close()
    assert [(r["task"], r["step"]) for r in lines(tmp_path)] == [
        ("worker:0", 1), ("worker:1", 2), ("worker:1", 3), ("worker:1", 4)]
    assert summary["reports"] == 4 and summary["dropped"]["bad_value"] == 2
    assert any("step" in why and "worker:0" in why for why in summary["dropped_why"])
    assert len(said) == 1 and "step" in said[0]
    assert [s for s, _ in series(tmp_path / "tensorboard" / "worker-1", "loss")] == [2, 3, 4]
    assert not [t for t in threading.enumerate() if t.name == "tfcluster-metrics"]


def test_a_number_too_large_for_a_float_is_kept_but_not_plotted(tmp_path: Path) -> None:
    sink = MetricsSink(tmp_path)
    sink.report(Report(ts=1.0, attempt=0, task="worker:0", step=1,
                       metrics={"huge": 10**400, "loss": 0.5}))
    sink.report(Report(ts=2.0, attempt=0, task="worker:0", step=2, metrics={"loss": 0.25}))
    summary = sink.close()
    assert [r["step"] for r in lines(tmp_path)] == [1, 2]
    assert summary["dropped"]["bad_value"] == 0
    assert series(tmp_path / "tensorboard" / "worker-0", "loss") == [(1, 0.5), (2, 0.25)]


def test_metrics_left_out_of_wide_reports_are_counted_with_the_reason(tmp_path: Path) -> None:
    sink = MetricsSink(tmp_path)
    for step in (1, 2):
        sink.report(Report(ts=float(step), attempt=0, task="worker:0", step=step,
                           metrics={"loss": 0.5}, dropped_metrics=400))
    summary = sink.close()
    assert summary["reports"] == 2 and summary["dropped"]["metrics_over_size"] == 800
    (why,) = summary["dropped_why"]
    assert "worker:0" in why and "400" in why and "bytes" in why


def test_reports_an_agent_replaced_are_counted_with_the_reason(tmp_path: Path) -> None:
    sink = MetricsSink(tmp_path)
    sink.report(Report(ts=1.0, attempt=0, task="worker:0", step=1, metrics={"loss": 0.5}))
    sink.report(Report(ts=2.0, attempt=0, task="worker:0", step=5, metrics={"loss": 0.4},
                       replaced_reports=3))
    summary = sink.close()
    assert summary["reports"] == 2 and summary["dropped"]["replaced"] == 3
    (why,) = summary["dropped_why"]
    assert "worker:0" in why and "replaced 3" in why
