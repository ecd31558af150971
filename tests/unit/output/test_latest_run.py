"""``status`` and ``logs`` without a run directory read the latest run under ``runs/`` (by the
start time in its name, whichever job it was); ``logs`` takes ``chief``, ``chief:0``,
``worker-1`` for a task, and a bare type only when it is one task."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.errors import UsageError
from launcher.output.latest_run import latest_run, looks_like_task, task_name


def make_run(base: Path, name: str) -> Path:
    path = base / name
    path.mkdir(parents=True)
    (path / "events.jsonl").write_text("")
    return path


def test_the_latest_run_is_the_last_started_of_any_job(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    make_run(runs, "zeta-20261205-101500")
    newest = make_run(runs, "alpha-20261205-101501-2")
    make_run(runs, "alpha-20261205-101501")
    (runs / "not-a-run-20991231-000000").mkdir()  # no events.jsonl
    (runs / "link-20991231-000000").symlink_to(newest)
    assert latest_run("status", runs) == newest


def test_no_run_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no run in .*runs/ here .*give a RUN_DIR"):
        latest_run("logs", tmp_path / "runs")


def test_task_names_as_a_user_writes_them() -> None:
    known = ["chief:0", "worker:0", "worker:1"]
    assert [task_name(t, known) for t in ("chief", "chief:0", "worker-1", "worker:1")] == \
        ["chief:0", "chief:0", "worker:1", "worker:1"]
    assert task_name("evaluator", ()) == "evaluator:0"
    with pytest.raises(UsageError, match=r"'worker' is 2 tasks \(worker:0, worker:1\)"):
        task_name("worker", known)
    assert task_name("worker", ["chief:0", "worker:0"]) == "worker:0"


def test_a_directory_named_like_a_task_is_a_directory(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert looks_like_task("chief") and looks_like_task("worker:1")
    (tmp_path / "chief").mkdir()
    assert not looks_like_task("chief") and not looks_like_task("runs/x")
