"""The coordinator's stop step with real processes on this machine: a lock-step job without
TensorFlow (tests/support/lockstep_watcher.py: a barrier per step, tfcluster's real
PreemptionWatcher, no collective for the stop) gets SIGTERM on one task, on two at once, and on
every task when tfcluster itself is stopped; each time every task stops after the same step, the
chief's checkpoint is of that step, and what comes next resumes right after it."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest

from tests.support.jobs import REPO, Job, by, fake_spec, running, write_spec

pytestmark = pytest.mark.timeout(90)

LOCKSTEP = REPO / "tests" / "support" / "lockstep_watcher.py"
_STOPPED = re.compile(r"lockstep (\S+): stopped after step (\d+)")
_FROM = re.compile(r"lockstep (\S+): attempt (\d+) from step (\d+)")


def spec_path(tmp_path: Path, steps: int = 150) -> Path:
    spec = fake_spec("stopstep", tasks=[{"type": "chief"}, {"type": "worker", "count": 2}],
                     entrypoint={"script": str(LOCKSTEP),
                                 "args": ["--steps", str(steps), "--step-time", "0.02"]},
                     python=sys.executable, workdir=str(REPO),
                     checkpoint={"dir": str(tmp_path / "ckpt")},
                     restart={"max_restarts": 0, "backoff_s": 0.1}, health={"grace_period_s": 10})
    return write_spec(tmp_path, spec)


def pid_of(job: Job, task: str) -> int:
    pid: int = job.wait_event(by("task_started", task=task, attempt=0))["pid"]
    return pid


def stops(run_dir: Path, attempt: int) -> dict[str, int]:
    text = "".join(p.read_text() for p in (run_dir / f"attempt-{attempt}").glob("*.log"))
    return {task: int(step) for task, step in _STOPPED.findall(text)}


def resumed_from(run_dir: Path, attempt: int) -> set[int]:
    text = "".join(p.read_text() for p in (run_dir / f"attempt-{attempt}").glob("*.log"))
    return {int(step) for _, _, step in _FROM.findall(text)}


def training(job: Job) -> None:
    job.wait_event(lambda e: e["event"] == "task_progress" and e["step"] >= 15, timeout=60)


def test_a_sigterm_to_one_task_stops_every_task_after_the_step_tfcluster_chose(
        tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with running(["run", str(spec_path(tmp_path))], run_dir, REPO) as job:
        training(job)
        os.kill(pid_of(job, "worker:0"), signal.SIGTERM)
        assert job.wait(60) == 0, job.stderr
    stopped = stops(run_dir, 0)
    assert set(stopped) == {"chief:0", "worker:0", "worker:1"}
    step, = set(stopped.values())
    assert f"worker:0 got a preemption notice after step {step - 1}" in job.stderr
    assert (tmp_path / "ckpt" / f"ckpt-{step}.index").exists()
    assert resumed_from(run_dir, 1) == {step}
    restart = job.wait_event(by("job_restarting"))
    assert restart["counts_against_budget"] is False and restart["resume_step"] == step


def test_notices_to_two_tasks_at_once_are_one_stop(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with running(["run", str(spec_path(tmp_path))], run_dir, REPO) as job:
        training(job)
        for task in ("chief:0", "worker:1"):
            os.kill(pid_of(job, task), signal.SIGTERM)
        assert job.wait(60) == 0, job.stderr
    stopped = stops(run_dir, 0)
    assert len(stopped) == 3 and len(set(stopped.values())) == 1, stopped
    assert job.stderr.count("got a preemption notice") == 1  # one preemption, said once
    assert resumed_from(run_dir, 1) == set(stopped.values())


def test_tfcluster_stopped_stops_every_task_after_one_step_and_resume_goes_on_from_it(
        tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    spec = spec_path(tmp_path)
    with running(["run", str(spec)], run_dir, REPO) as job:
        training(job)
        job.proc.send_signal(signal.SIGTERM)  # every task gets TERM from its agent at once
        code = job.wait(60)
    assert code == 128 + signal.SIGTERM, job.stderr
    stopped = stops(run_dir, 0)
    assert len(stopped) == 3 and len(set(stopped.values())) == 1, stopped
    step = next(iter(stopped.values()))
    assert (tmp_path / "ckpt" / f"ckpt-{step}.index").exists()
    with running(["run", "--resume", str(run_dir)], run_dir, REPO) as again:
        assert again.wait(60) == 0, again.stderr
    assert resumed_from(run_dir, 1) == {step}
