"""Unchanged scripts are first-class: a script that never calls ``worker.report`` is not killed
by a deadline it never opted into, ``local -- python3 script.py`` runs in tfcluster's own
interpreter, and a job that restarts from the beginning says why (with the recovery figures
derived from task starts, or said to be unknown)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.cli.verbs import _load_for_run
from launcher.job.health import HealthMonitor, in_force
from launcher.job.state import JobState
from launcher.plan.planner import ResumePoint
from launcher.plan.view import deadlines
from launcher.run.failures import FailureKind, TaskFailure
from launcher.run.outcome import AttemptResult, AttemptStatus
from launcher.run.restart_line import restart_from
from launcher.run.summary import recovery
from launcher.spec.health import HealthSpec
from tests.support.fake_backend import TaskScript
from tests.support.jobs import by, read_events, running, wait_until_gone, write_spec
from tests.unit.job.test_job_loop import run as sim_run
from tests.unit.job.test_job_loop import spec as sim_spec

pytestmark = pytest.mark.timeout(90)

#: A script that knows nothing of tfcluster: it works a while and never reports a step.
SILENT = """\
import os, sys, time
time.sleep(float(sys.argv[1]))
print("silent script done, attempt", os.environ["TFCLUSTER_ATTEMPT"], "in", sys.executable)
sys.exit(int(sys.argv[2]) if os.environ["TFCLUSTER_ATTEMPT"] == "0" else 0)
"""


def earlier(max_step: int | None) -> AttemptResult:
    return AttemptResult(attempt=0, status=AttemptStatus.FAILED, started_at=0.0, ended_at=1.0,
                         max_step=max_step)


def test_the_default_start_up_deadline_applies_only_once_an_attempt_reported_steps() -> None:
    default = HealthSpec()
    assert in_force(default, []).startup_timeout_s is None
    assert in_force(default, [earlier(None)]).startup_timeout_s is None
    assert in_force(default, [earlier(120)]).startup_timeout_s == 300
    explicit = HealthSpec(startup_timeout_s=0.5)
    assert in_force(explicit, []).startup_timeout_s == 0.5
    assert in_force(HealthSpec(startup_timeout_s=None), [earlier(120)]).startup_timeout_s is None


def test_a_task_that_never_reports_has_no_deadline_under_the_default_settings() -> None:
    monitor = HealthMonitor(in_force(HealthSpec(), []), now=0.0)
    monitor.task_started("worker:0", "localhost", 0.0)
    assert monitor.check(10_000.0) == []  # neither start-up nor hang, ever
    monitor.host_seen("localhost", 9_999.0)
    assert all(issue.task is None for issue in monitor.check(10_000.0))
    strict = HealthMonitor(in_force(HealthSpec(startup_timeout_s=0.5), []), now=0.0)
    strict.task_started("worker:0", "localhost", 0.0)
    assert [issue.task for issue in strict.check(1.0)] == ["worker:0"]


def test_plan_says_which_deadlines_are_in_force() -> None:
    shown = deadlines(HealthSpec())
    assert "only once an attempt of this job has reported steps" in shown["startup"]
    assert "counted from a task's first step report" in shown["hang"]
    assert deadlines(HealthSpec(startup_timeout_s=30))["startup"].startswith(
        "a task with no step report 30s")
    assert deadlines(HealthSpec(startup_timeout_s=None, hang_timeout_s=None)) == {
        "startup": "off (health.startup_timeout_s: null)",
        "hang": "off (health.hang_timeout_s: null)",
        "lost_host": "an agent silent for 15s"}


def silent_spec(tmp_path: Path, name: str, health: dict[str, Any], *, seconds: float,
                first_exit: int = 0, **fields: Any) -> Path:
    script = tmp_path / "silent.py"
    script.write_text(SILENT)
    spec = {"name": name, "entrypoint": {"script": str(script), "args": [str(seconds),
                                                                          str(first_exit)]},
            "tasks": [{"type": "worker", "count": 2}],
            "restart": {"max_restarts": 1, "backoff_s": 0.1}, "health": health, **fields}
    return write_spec(tmp_path, spec)


def silent(seconds: float, exit_code: int | None = 0) -> TaskScript:
    """Runs ``seconds`` (simulated) without reporting a single step, then exits."""
    return TaskScript(steps=0, step_s=seconds, exit_code=exit_code)


def test_the_job_loop_lets_a_silent_task_run_past_the_default_deadline(tmp_path: Path) -> None:
    job = sim_run(tmp_path, sim_spec(tmp_path, restart={"max_restarts": 0}),
                  lambda attempt, task: silent(400.0))  # past the default 300 s
    assert job.result.state is JobState.SUCCEEDED
    assert job.of("task_failed") == []
    assert job.clock.now >= 400.0


def test_the_job_loop_holds_a_silent_task_to_an_explicit_deadline(tmp_path: Path) -> None:
    job = sim_run(tmp_path, sim_spec(tmp_path, health={"startup_timeout_s": 300.0},
                                     restart={"max_restarts": 0}),
                  lambda attempt, task: silent(400.0))
    assert job.result.state is JobState.FAILED
    assert {e["kind"] for e in job.of("task_failed")} == {"startup_timeout"}


def test_once_an_attempt_reported_steps_the_default_deadline_holds(tmp_path: Path) -> None:
    def scripts(attempt: int, task: str) -> TaskScript:
        if attempt == 0:
            return TaskScript(steps=5, exit_code=3 if task == "worker:1" else None)
        return silent(400.0)  # the same script, now stuck before its first step

    job = sim_run(tmp_path, sim_spec(tmp_path, restart={"max_restarts": 1, "backoff_s": 0.1}),
                  scripts)
    assert job.result.state is JobState.FAILED
    failed = [e for e in job.of("task_failed") if e["attempt"] == 1]
    assert failed and {e["kind"] for e in failed} == {"startup_timeout"}


def test_an_explicit_tiny_start_up_deadline_stops_a_real_silent_script(tmp_path: Path) -> None:
    strict = silent_spec(tmp_path, "strict", {"startup_timeout_s": 1.0, "grace_period_s": 1},
                         seconds=30, restart={"max_restarts": 0})
    with running(["run", str(strict)], tmp_path / "strict-run", tmp_path) as job:
        assert job.wait(60) != 0
        assert wait_until_gone(job.mark, 10) == []
    failed = [e for e in read_events(tmp_path / "strict-run") if e["event"] == "task_failed"]
    assert {e["kind"] for e in failed} == {"startup_timeout"}


def test_run_with_checkpoint_dir_keeps_the_start_up_deadline_unset(tmp_path: Path) -> None:
    """``--checkpoint-dir`` rebuilds the spec: what the file did not set must stay unset."""
    path = silent_spec(tmp_path, "rebuilt", {"grace_period_s": 1}, seconds=1)
    rebuilt = _load_for_run(argparse.Namespace(spec=str(path), checkpoint_dir=str(tmp_path)))
    assert rebuilt.checkpoint is not None and rebuilt.checkpoint.dir == str(tmp_path)
    assert in_force(rebuilt.health, []).startup_timeout_s is None


def test_a_restart_from_the_beginning_says_no_checkpoint_was_ever_written(tmp_path: Path) -> None:
    spec = silent_spec(tmp_path, "nockpt", {"grace_period_s": 1}, seconds=0.2, first_exit=3,
                       checkpoint={"dir": str(tmp_path / "ckpt")})
    with running(["run", str(spec)], tmp_path / "run", tmp_path) as job:
        assert job.wait(60) == 0, job.stderr
    restart = next(line for line in job.stderr.splitlines() if "restarting the job" in line)
    assert ("from the beginning as far as tfcluster knows: no checkpoint was ever written to "
            f"{tmp_path / 'ckpt'}") in restart
    assert "TFCLUSTER_CHECKPOINT_DIR" in restart and "temporary directory" in restart
    first = json.loads((tmp_path / "run" / "summary.json").read_text())["attempts"][0]
    assert first["steps_lost"] is None
    assert first["steps_lost_note"].startswith("unknown: the tasks report no steps")
    started = [e["ts"] for e in read_events(tmp_path / "run")
               if e["event"] == "task_started" and e["attempt"] == 1]
    assert first["recovery_from"] == "tasks_started"
    assert first["recovery_s"] == pytest.approx(max(started) - first["root_cause"]["died_at"],
                                                abs=0.01)


def test_local_python3_runs_in_tfclusters_interpreter_without_it_on_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "main.py"
    script.write_text("import sys\nprint('interpreter', sys.executable)\n")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # tfcluster's venv is not on it
    with running(["local", "-n", "2", "--", "python3", str(script)], tmp_path / "run",
                 tmp_path) as job:
        assert job.wait(60) == 0, job.stderr
    assert job.stdout.count(f"interpreter {sys.executable}") == 2
    notes = [line for line in job.stderr.splitlines() if "tfcluster's own interpreter" in line]
    assert notes == [f"tfcluster: running 'python3' as tfcluster's own interpreter "
                     f"{sys.executable} (as torchrun does); give a path, e.g. /usr/bin/python3, "
                     "to run another one"]
    started = read_events(tmp_path / "run")
    assert any(by("task_started", task="worker:1")(e) for e in started)


@pytest.mark.skipif(shutil.which("python3", path="/usr/bin") is None, reason="no /usr/bin/python3")
def test_local_with_a_path_to_python_runs_that_interpreter(tmp_path: Path) -> None:
    script = tmp_path / "main.py"
    script.write_text("import sys\nprint('interpreter', sys.executable)\n")
    with running(["local", "-n", "1", "--", "/usr/bin/python3", str(script)], tmp_path / "run",
                 tmp_path) as job:
        assert job.wait(60) == 0, job.stderr
    assert "interpreter /usr/bin/python3" in job.stdout
    assert "tfcluster's own interpreter" not in job.stderr


def test_plan_prints_the_deadlines_in_force(tmp_path: Path) -> None:
    path = silent_spec(tmp_path, "shown", {"hang_timeout_s": None}, seconds=1)
    shown = subprocess.run([sys.executable, "-m", "launcher", "plan", str(path)], cwd=tmp_path,
                           capture_output=True, text=True, timeout=30, check=True).stdout
    deadline_lines = [line for line in shown.splitlines() if line.startswith("deadline ")]
    assert deadline_lines == [
        "deadline startup: 300s, only once an attempt of this job has reported steps "
        "(worker.report); set health.startup_timeout_s to enforce it from the start",
        "deadline hang: off (health.hang_timeout_s: null)",
        "deadline lost host: an agent silent for 15s"]


def failed_attempt(number: int, *, kind: FailureKind = FailureKind.EXITED,
                   **fields: Any) -> AttemptResult:
    cause = TaskFailure(task="worker:0", host="localhost", attempt=number, kind=kind,
                        died_at=10.0 * number + 5.0, observed_at=10.0 * number + 5.1)
    return AttemptResult(attempt=number, status=AttemptStatus.FAILED, started_at=10.0 * number,
                         ended_at=10.0 * number + 6.0, failures=(cause,), **fields)


def next_attempt() -> AttemptResult:
    return AttemptResult(attempt=1, status=AttemptStatus.SUCCEEDED, started_at=7.0,
                         ended_at=20.0, resume_step=40)


def test_recovery_figures_without_step_reports_are_derived_or_said_unknown() -> None:
    unknown = recovery([failed_attempt(0, checkpoint_step=40), next_attempt()], 0)
    assert unknown == {"steps_lost": None, "recovery_s": None,
                       "steps_lost_note": "unknown: the tasks report no steps (worker.report); "
                                          "what came after checkpoint step 40 was lost"}
    derived = recovery([failed_attempt(0), next_attempt()], 0, tasks_started={1: 8.5})
    assert derived["recovery_s"] == 3.5 and derived["recovery_from"] == "tasks_started"
    assert derived["steps_lost_note"] == "unknown: the tasks report no steps (worker.report)"
    saved = recovery([failed_attempt(0, kind=FailureKind.PREEMPTED, made_progress=True,
                                     checkpoint_step=40), next_attempt()], 0)
    assert saved["steps_lost"] == 0 and "steps_lost_note" not in saved


def test_a_restart_says_where_it_starts_and_why_from_the_beginning() -> None:
    assert restart_from(ResumePoint("/c/ckpt-40", 40), "/c", []) == "step 40"
    nothing_known = restart_from(None, None, [])
    assert nothing_known.startswith("the beginning as far as tfcluster knows (it was given no "
                                    "checkpoint.dir; a script that restores checkpoints of its "
                                    "own resumes from them by itself)")
    assert restart_from(None, "/c", [failed_attempt(0, checkpoint_step=40)]) == \
        "the beginning as far as tfcluster knows (no usable checkpoint in /c)"
    never = restart_from(None, "/c", [failed_attempt(0)])
    assert never.startswith("the beginning as far as tfcluster knows: no checkpoint was ever "
                            "written to /c (checkpoint.dir)")
    assert "TFCLUSTER_CHECKPOINT_DIR" in never and "per-process temporary directory" in never


def test_the_checkpoint_dir_hint_is_said_once_and_not_for_tasks_that_never_ran() -> None:
    loop = [failed_attempt(0), failed_attempt(1), failed_attempt(2)]
    said = [restart_from(None, "/c", loop[:n]) for n in (1, 2, 3)]
    assert ["TFCLUSTER_CHECKPOINT_DIR" in line for line in said] == [True, False, False]
    never_ran = [failed_attempt(0, kind=FailureKind.SPAWN_FAILED)]
    assert "TFCLUSTER_CHECKPOINT_DIR" not in restart_from(None, "/c", never_ran)


def test_run_says_when_a_specs_python_command_is_not_tfclusters_interpreter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    path = write_spec(tmp_path, {"name": "pathpy", "tasks": [{"type": "worker", "count": 1}],
                                 "entrypoint": {"command": ["python3", "-c", "print('hi')"]}})
    with running(["run", str(path)], tmp_path / "run", tmp_path) as job:
        assert job.wait(60) == 0, job.stderr
    notes = [line for line in job.stderr.splitlines() if "as the spec's command says" in line]
    found = shutil.which("python3", path="/usr/bin:/bin")
    where = "not found on PATH" if found is None else f"{found} on PATH"
    assert notes == [f"tfcluster: local tasks run 'python3' as the spec's command says ({where}), "
                     f"not tfcluster's interpreter {sys.executable}; use entrypoint.script or "
                     "module to run them with tfcluster's"]
