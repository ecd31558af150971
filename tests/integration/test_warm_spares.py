"""Warm spares in a whole job (``restart.warm_spares``): after a crash the next attempt's tasks
start from spares that were waiting with their imports done; a spare that could not be made
falls back to a cold start that says why; nothing is left behind."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from tests.support.jobs import by, fake_spec, running, wait_until_gone, write_spec

pytestmark = pytest.mark.timeout(120)

CRASH_ONCE = ["--steps", "40", "--step-time", "0.05", "--fail-task", "worker:1",
              "--fail-at-step", "20", "--fail-attempts", "0"]


def warm_spec(name: str, preload: list[str]) -> dict[str, object]:
    spec = fake_spec(name, args=CRASH_ONCE, tasks=[{"type": "worker", "count": 2}],
                     restart={"max_restarts": 1, "backoff_s": 0.05, "warm_spares": True})
    spec["entrypoint"] = {**spec["entrypoint"], "preload": preload}  # type: ignore[dict-item]
    return spec


def test_the_restarted_tasks_start_from_warm_spares(tmp_path: Path) -> None:
    spec = warm_spec("warm", ["json", "decimal"])
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        # independently of the event's "warm": each task of attempt 1 is a process that was
        # already running before the attempt began (a spare), not one started for it
        began = job.wait_event(by("attempt_started", attempt=1))["ts"]
        for task in ("worker:0", "worker:1"):
            pid = job.wait_event(by("task_started", attempt=1, task=task))["pid"]
            assert psutil.Process(pid).create_time() < began - 0.05, task
        assert job.wait() == 0, job.stderr
        mark = job.mark
        events = job.events()
    started = {(e["attempt"], e["task"]): e for e in events if e["event"] == "task_started"}
    assert [started[(0, t)]["warm"] for t in ("worker:0", "worker:1")] == [False, False]
    assert [started[(0, t)]["cold_reason"] for t in ("worker:0", "worker:1")] == [None, None]
    assert [started[(1, t)]["warm"] for t in ("worker:0", "worker:1")] == [True, True], started
    assert all(e["cold_reason"] is None for k, e in started.items() if k[0] == 1)
    finals = [e for e in events if e["event"] == "task_exited" and e["attempt"] == 1]
    assert sorted(e["exit_code"] for e in finals) == [0, 0]  # the spare became the task
    log = (tmp_path / "run" / "attempt-1" / "worker-1.log").read_text()
    assert "done step=40" in log
    assert wait_until_gone(mark, timeout=10) == []  # the spares made for attempt 2 too


def test_a_spare_that_cannot_be_made_falls_back_to_a_cold_start_and_says_why(
        tmp_path: Path) -> None:
    spec = warm_spec("cold", ["no_such_module_for_tfcluster_tests"])
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        assert job.wait() == 0, job.stderr
        second = job.wait_event(by("task_started", attempt=1, task="worker:0"))
    assert second["warm"] is False
    assert "cannot import 'no_such_module_for_tfcluster_tests'" in second["cold_reason"], second
