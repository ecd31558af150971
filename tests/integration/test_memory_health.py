"""Per-task health with real processes: a slowed task is named the straggler within the window, a
task whose memory grows is warned about, and a task that SIGKILLs itself after growing is reported
as a likely out-of-memory kill, with what to do. The figures reach summary.json and `status`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.health_jobs import health_spec
from tests.support.jobs import REPO, by, run_status, running, write_spec

pytestmark = pytest.mark.timeout(120)

def test_a_slowed_task_is_flagged_as_the_straggler_within_the_window(tmp_path: Path) -> None:
    window = 4.0
    args = ["--duration", "14", "--step-time", "0.05", "--slow-task", "worker:2"]
    argv = ["run", str(write_spec(tmp_path, health_spec("slow", args, straggler_window_s=window)))]
    with running(argv, tmp_path / "run", REPO) as job:
        first = job.wait_event(by("task_progress", task="worker:2"))
        flag = job.wait_event(by("task_straggling", task="worker:2", straggling=True),
                              timeout=window + 10)
        assert job.wait(60) == 0, job.stderr
    # the window, plus half a window between two looks, plus a margin for a loaded machine
    assert flag["ts"] - first["ts"] <= window * 1.5 + 2.0
    assert flag["steps_per_s"] < 0.5 * flag["others_steps_per_s"]
    events = job.events()
    assert {e["task"] for e in events if e["event"] == "task_straggling" and e["straggling"]} == {
        "worker:2"}
    assert "worker:2 is a straggler" in job.stderr
    health = [e for e in events if e["event"] == "job_health" and e["tasks"]]
    # named the slowest while the others still stepped (at the very end they may be done)
    assert health and "worker:2" in {e["slowest"] for e in health}
    # the figures of a task still running (CI failure under load: worker:0 had ended before the
    # last report)
    latest = [e["tasks"]["worker:0"] for e in health if "worker:0" in e["tasks"]][-1]
    assert set(latest) >= {"steps_per_s", "cpu_percent", "rss_bytes"}
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [s["task"] for s in summary["health"]["stragglers"]] == ["worker:2"]
    assert summary["health"]["tasks"]["worker:0"]["peak_rss_bytes"] > 0
    assert "straggler: worker:2" in run_status(tmp_path / "run")


def test_growing_memory_is_warned_about_before_the_job_ends(tmp_path: Path) -> None:
    args = ["--duration", "5", "--grow-task", "worker:1", "--grow-mib", "300"]
    argv = ["run", str(write_spec(tmp_path, health_spec("grow", args, memory_limit_mib=400,
                                                 memory_warn_ratio=0.5)))]
    with running(argv, tmp_path / "run", REPO) as job:
        warning = job.wait_event(by("task_memory_high", task="worker:1"))
        assert job.wait(60) == 0, job.stderr
    assert warning["rss_bytes"] >= 200 * 2**20 and warning["limit_bytes"] == 400 * 2**20
    assert [e["task"] for e in job.events() if e["event"] == "task_memory_high"] == ["worker:1"]
    assert "worker:1 is running out of memory" in job.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [w["task"] for w in summary["health"]["memory_warnings"]] == ["worker:1"]
    assert summary["health"]["tasks"]["worker:1"]["peak_rss_bytes"] >= 300 * 2**20


def test_a_sigkill_after_growing_memory_is_named_a_likely_oom_kill(tmp_path: Path) -> None:
    args = ["--duration", "30", "--grow-task", "worker:1", "--grow-mib", "300",
            "--kill-after-grow", "3"]
    argv = ["run", str(write_spec(tmp_path, health_spec("oom", args, memory_limit_mib=400,
                                                 memory_warn_ratio=0.5)))]
    with running(argv, tmp_path / "run", REPO) as job:
        assert job.wait(60) == 128 + 9, job.stderr
    (failed,) = [e for e in job.events() if e["event"] == "task_failed"
                 and e["task"] == "worker:1"]
    assert failed["signal"] == "SIGKILL"
    assert "likely killed for running out of memory" in failed["message"]
    assert "smaller per-replica batch size" in failed["message"]
    assert failed["kind"] == "out_of_memory"
    root = job.stderr.split("Root cause", 1)[1].splitlines()[0]
    assert "SIGKILL: likely killed for running out of memory" in root
    assert "likely killed for running out of memory" in run_status(tmp_path / "run")


def test_a_sigkill_with_little_memory_stays_a_bare_sigkill(tmp_path: Path) -> None:
    args = ["--duration", "30", "--grow-task", "worker:1", "--grow-mib", "1",
            "--kill-after-grow", "1.5"]
    argv = ["run", str(write_spec(tmp_path, health_spec("kill", args)))]
    with running(argv, tmp_path / "run", REPO) as job:
        assert job.wait(60) == 128 + 9, job.stderr
    (failed,) = [e for e in job.events() if e["event"] == "task_failed"
                 and e["task"] == "worker:1"]
    assert failed["signal"] == "SIGKILL" and failed["message"] is None
