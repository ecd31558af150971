"""Hostile and careless inputs with real processes (issue 25): a value of ``tfcluster submit``
with a line break in it, reports too wide or with impossible steps, preemption reports with no
checkpoint, a ``stop`` drill that nothing would end, ten runs started at once in one directory, a
resumed run whose directory is gone. Each ends in one clear line or a kept report, never in a hang,
a dead writer or a stranger's files touched."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.run.outcome import FREE_UNSAVED_PREEMPTIONS
from tests.support.jobs import REPO, by, read_events, running

pytestmark = pytest.mark.timeout(120)


def tfcluster(*argv: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, check=False,
                          env={"PYTHONPATH": str(REPO), "NO_COLOR": "1", "PATH": "/usr/bin:/bin"})


# --- tfcluster submit: every value one line ----------------------------------------------------


def test_submit_refuses_a_partition_with_a_line_break_and_runs_nothing(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "s", "entrypoint": {"module": "m"},
                                    "tasks": [{"type": "worker"}], "slurm": {}}))
    pwned = tmp_path / "pwned"
    done = tfcluster("submit", str(spec), "--nodes", "1", "--dry-run",
                     "--partition", f"debug\ntouch {pwned}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--partition" in lines[0] and "Traceback" not in done.stderr
    assert done.stdout == "" and not pwned.exists()


# --- tfcluster drill --fault stop without health.hang_timeout_s ---------------------------------


def test_a_stop_drill_without_a_hang_timeout_is_refused_up_front(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "s", "entrypoint": {"script": str(REPO / "tests/support/fake_trainer.py"),
                                    "args": ["--steps", "1000"]},
        "tasks": [{"type": "worker", "count": 2}], "health": {"hang_timeout_s": None}}))
    done = tfcluster("drill", str(spec), "--fault", "stop:worker:0:at-step=2",
                     "--run-dir", str(tmp_path / "run"), cwd=tmp_path, timeout=30)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "health.hang_timeout_s" in lines[0], done.stderr
    assert "stop:worker:0" in lines[0]
    assert not (tmp_path / "run" / "events.jsonl").exists()  # nothing was started


# --- a preemption reported, exit 143, nothing saved: again and again ----------------------------

PREEMPTED_AT_ONCE = """\
import sys
from worker.reporting import send
send({"kind": "preempted", "step": 0})
sys.exit(143)
"""


def test_preemptions_that_never_save_end_the_job(tmp_path: Path) -> None:
    script = tmp_path / "preempted.py"
    script.write_text(PREEMPTED_AT_ONCE)
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "p", "entrypoint": {"script": str(script)}, "tasks": [{"type": "worker"}],
        "checkpoint": {"dir": str(tmp_path / "ckpt")},
        "restart": {"max_restarts": 2, "backoff_s": 0.05, "backoff_max_s": 0.1}}))
    run_dir = tmp_path / "run"
    done = tfcluster("run", str(spec), "--run-dir", str(run_dir), "--quiet", cwd=tmp_path,
                     timeout=90)
    assert done.returncode != 0, done.stderr
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    restarts = [e for e in events if e["event"] == "job_restarting"]
    free = [e for e in restarts if not e["counts_against_budget"]]
    assert len(free) == FREE_UNSAVED_PREEMPTIONS, done.stderr
    assert len(restarts) <= FREE_UNSAVED_PREEMPTIONS + 2
    (failed,) = [e for e in events if e["event"] == "job_failed"]
    assert "saved no newer checkpoint" in failed["reason"] or "crash loop" in failed["reason"]


# --- ten runs started at the same moment in one directory ---------------------------------------


def test_ten_local_runs_started_at_once_each_get_their_own_run_dir(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(REPO), "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    argv = [sys.executable, "-m", "launcher", "local", "-n", "1", "--", sys.executable, "-c",
            "pass"]
    runs = [subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True) for _ in range(10)]
    try:
        errors = [run.communicate(timeout=90)[1] for run in runs]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait(10)
    assert [run.returncode for run in runs] == [0] * 10, errors
    dirs = sorted((tmp_path / "runs").iterdir())
    assert len(dirs) == 10
    for run_dir in dirs:
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
        kinds = [e["event"] for e in events]
        assert kinds.count("job_started") == 1 and kinds[-1] == "job_succeeded", kinds


# --- wide reports, impossible steps ------------------------------------------------------------

WIDE_REPORTS = """\
import os, time
from worker import report
wide = {"worker:0": 1200, "worker:1": 6000}[os.environ["TFCLUSTER_TASK"]]
report(0, loss=1.0)
for step in range(1, 21):
    time.sleep(0.1)  # the step's work: the reports alone tell tfcluster the task is not hung
    report(step, **{f"grad_norm/model/layer_{i:04d}/kernel:0": 0.5 + i for i in range(wide)})
"""


def spec_for(tmp_path: Path, script: str, **fields: object) -> Path:
    path = tmp_path / "job.py"
    path.write_text(script)
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "job", "entrypoint": {"script": str(path)},
                                    "restart": {"max_restarts": 0}, **fields}))
    return spec


def test_wide_reports_are_kept_and_count_as_progress(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, WIDE_REPORTS, tasks=[{"type": "worker", "count": 2}],
                    health={"hang_timeout_s": 1.0})
    run_dir = tmp_path / "run"
    done = tfcluster("run", str(spec), "--run-dir", str(run_dir), "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr  # not killed as hung
    kept = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for task in ("worker:0", "worker:1"):  # every report, or a newer one counted in its place
        steps = [r["step"] for r in kept if r["task"] == task]
        assert steps[0] == 0 and steps[-1] == 20 and steps == sorted(set(steps)), steps
    assert all(len(r["metrics"]) == 1200 for r in kept if r["task"] == "worker:0" and r["step"])
    trimmed = [r for r in kept if r["task"] == "worker:1" and r["step"]]
    assert all(0 < len(r["metrics"]) < 6000 for r in trimmed)
    metrics = json.loads((run_dir / "summary.json").read_text())["metrics"]
    # every report, or a newer one in its place (the agent's replacements counted; a task's own
    # batching may replace one it had not written yet, when its sender thread lags)
    assert 2 * 2 < metrics["reports"] + metrics["dropped"]["replaced"] <= 42
    left_out = metrics["dropped"]["metrics_over_size"]
    assert left_out == sum(6000 - len(r["metrics"]) for r in trimmed)
    assert any("worker:1" in why for why in metrics["dropped_why"])
    log = (run_dir / "attempt-0" / "worker-1.log").read_text()
    assert log.count("more than a report holds") == 1  # said once
    quiet = run_dir / "attempt-0" / "worker-0.log"  # a log is written once there is output
    assert not quiet.exists() or "more than a report holds" not in quiet.read_text()


IMPOSSIBLE_STEPS = """\
import sys
from worker.reporting import flush, report, send
send({"kind": "progress", "step": 2**70, "metrics": {"loss": 1.0}})  # past the helper's check
for step in range(1, 4):
    report(step, loss=1.0 / step)
    flush()  # each one written (not replaced by the next, as batching would)
try:
    report(2**70, loss=0.1)
except ValueError as exc:
    print(f"refused: {exc}", file=sys.stderr)
"""


def test_an_impossible_step_costs_no_other_report(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, IMPOSSIBLE_STEPS, tasks=[{"type": "worker"}])
    run_dir = tmp_path / "run"
    done = tfcluster("run", str(spec), "--run-dir", str(run_dir), "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    kept = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in kept] == [1, 2, 3]
    log = (run_dir / "attempt-0" / "worker-0.log").read_text()
    assert f"refused: worker.report: step {2**70} is out of range" in log


# --- a resumed run whose workdir is gone --------------------------------------------------------


def test_resuming_a_run_whose_workdir_is_gone_says_so_and_starts_nothing(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "wd").mkdir(parents=True)
    spec = base / "r.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "r", "workdir": "wd", "tasks": [{"type": "worker"}],
        "entrypoint": {"script": str(REPO / "tests/support/fake_trainer.py"),
                       "args": ["--steps", "100000", "--step-time", "0.05"]}}))
    run_dir = tmp_path / "run"
    with running(["run", str(spec), "--quiet"], run_dir, cwd=base) as first:
        first.wait_event(by("task_progress"))
        first.proc.send_signal(signal.SIGTERM)  # stopped: a run that can be resumed
        first.wait(30)
    attempts = [e for e in read_events(run_dir) if e["event"] == "attempt_started"]
    shutil.rmtree(base)
    done = tfcluster("run", "--resume", str(run_dir), cwd=tmp_path)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"workdir {base / 'wd'} no longer exists" in lines[0], done.stderr
    assert [e for e in read_events(run_dir) if e["event"] == "attempt_started"] == attempts
