"""``tfcluster run --resume RUN_DIR`` after the coordinator died: real processes (the fake
trainer), a real SIGKILL of tfcluster, then a second tfcluster continuing the same run directory."""

from __future__ import annotations

import json
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import procs
from tests.support.jobs import (
    FAKE_TRAINER,
    Job,
    by,
    fake_spec,
    read_events,
    running,
    wait_for_checkpoint,
    wait_until_gone,
    write_spec,
)

pytestmark = pytest.mark.timeout(120)

#: Slow enough steps that the coordinator is killed between two checkpoints (10 and 20).
TRAIN = ["--steps", "30", "--step-time", "0.15", "--checkpoint-every", "10"]


def latest_checkpoint_step(directory: Path) -> int:
    """The step of the newest checkpoint the chief's ``checkpoint`` state file names."""
    state = (directory / "checkpoint").read_text()
    found = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', state, re.MULTILINE)
    assert found, state
    return int(found.group(1))


def kill_coordinator_past(job: Job, attempt: int, step: int) -> list[int]:
    """SIGKILL tfcluster once the chief of ``attempt`` reported ``step``; assert that every task
    of the job (pids from ``task_started``) and every agent is gone within 5 s. Returns the pids."""
    job.wait_event(lambda e: e["event"] == "task_progress" and e["attempt"] == attempt
                   and e["task"] == "chief:0" and e["step"] >= step, timeout=60)
    pids = [e["pid"] for e in job.events() if e["event"] == "task_started"]
    job.proc.send_signal(signal.SIGKILL)
    assert job.proc.wait(10) == -signal.SIGKILL
    left = procs.wait_until_empty(lambda: procs.alive(procs.by_pid(pids)), 5)
    assert left == [], f"tasks outlived the coordinator by 5 s: {[p.pid for p in left]}"
    assert wait_until_gone(job.mark, 5) == []  # agents too
    return pids


def resume(run_dir: Path, cwd: Path, timeout: float = 60) -> tuple[int, Job]:
    with running(["run", "--resume", str(run_dir)], run_dir, cwd) as job:
        code = job.wait(timeout)
        assert wait_until_gone(job.mark, 5) == []
    return code, job


def results(run_dir: Path, attempt: int) -> dict[str, list[str]]:
    """What each task printed as its result: the fake trainer's ``done step=N`` line and, with
    ``--result``, the chief's ``tfcluster-result: sha256=...`` (a hash chained over every step,
    carried through checkpoints: equal only if the resume restored the right state)."""
    return {log.stem: [line for line in log.read_text().splitlines()
                       if " done " in line or "tfcluster-result:" in line]
            for log in sorted((run_dir / f"attempt-{attempt}").glob("*.log"))}


def attempts_of(events: list[dict[str, Any]]) -> list[int]:
    return [e["attempt"] for e in events if e["event"] == "attempt_started"]


def summary_of(run_dir: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    return summary


def test_a_local_run_resumes_from_its_checkpoint_after_a_coordinator_sigkill(
        tmp_path: Path) -> None:
    def local(name: str) -> list[str]:
        return ["local", "-n", "3", "--chief", "--max-restarts", "1", "--name", "resumed",
                "--checkpoint-dir", str(tmp_path / name), "--", str(FAKE_TRAINER), *TRAIN,
                "--result"]

    run_dir = tmp_path / "run"
    with running(local("ckpt"), run_dir, tmp_path) as first:
        first.wait_event(by("attempt_started", attempt=0))
        alive = subprocess.run([sys.executable, "-m", "launcher", "run", "--resume", str(run_dir)],
                               check=False, capture_output=True, text=True, timeout=30,
                               cwd=tmp_path)
        assert alive.returncode == 1
        assert f"its coordinator (pid {first.proc.pid}) is still running" in alive.stderr
        assert len(alive.stderr.splitlines()) == 1, alive.stderr
        kill_coordinator_past(first, attempt=0, step=11)
    stored = run_dir / "spec.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600  # its env may hold secrets
    step = latest_checkpoint_step(tmp_path / "ckpt")
    assert step >= 10
    before = read_events(run_dir)

    code, second = resume(run_dir, tmp_path)

    assert code == 0, second.stderr
    events = read_events(run_dir)
    assert events[:len(before)] == before  # appended to, not rewritten
    assert attempts_of(events) == [0, 1]
    resumed = next(e for e in events if e["event"] == "job_resumed")
    assert resumed["job"] == "resumed"
    assert (resumed["attempt"], resumed["previous_attempt"]) == (1, 0)
    assert (resumed["restarts_used"], resumed["counts_against_budget"]) == (0, False)
    assert resumed["resume_step"] == step
    assert resumed["resume_checkpoint"] == str(tmp_path / "ckpt" / f"ckpt-{step}")
    started = next(e for e in events if e["event"] == "attempt_started" and e["attempt"] == 1)
    assert started["resume_step"] == step
    assert {e["step"] for e in events if e["event"] == "task_progress" and e["attempt"] == 1
            and e["first"]} == {step + 1}  # every task resumed there
    assert f"starting at step {step}" in (run_dir / "attempt-1" / "chief-0.log").read_text()
    summary = summary_of(run_dir)
    assert summary["status"] == "succeeded"
    assert [(a["attempt"], a["status"], a["counted_against_budget"])
            for a in summary["attempts"]] == [(0, "interrupted", False), (1, "succeeded", False)]

    baseline = tmp_path / "baseline"  # the same job, never interrupted
    with running(local("baseline-ckpt"), baseline, tmp_path) as uninterrupted:
        assert uninterrupted.wait(60) == 0, uninterrupted.stderr
    assert results(run_dir, 1) == results(baseline, 0)
    assert len(results(run_dir, 1)) == 3
    assert any(line.startswith("tfcluster-result: sha256=") for line in
               results(run_dir, 1)["chief-0"])

    code, again = resume(run_dir, tmp_path)  # nothing left to do: one line, exit 0
    assert code == 0
    assert "already succeeded" in again.stderr and attempts_of(read_events(run_dir)) == [0, 1]


def budget_spec(tmp_path: Path, name: str, fail_attempts: str) -> Path:
    """Chief and one worker; the chief crashes at step 15 on ``fail_attempts``; one restart."""
    args = [*TRAIN, "--fail-task", "chief:0", "--fail-at-step", "15",
            "--fail-attempts", fail_attempts]
    spec = fake_spec(name, args=args,
                     tasks=[{"type": "chief"}, {"type": "worker", "count": 1}],
                     checkpoint={"dir": str(tmp_path / "ckpt")},
                     restart={"max_restarts": 1, "backoff_s": 0.1})
    return write_spec(tmp_path, spec)


def test_restarts_used_before_the_coordinator_died_stay_used(tmp_path: Path) -> None:
    spec = budget_spec(tmp_path, "budget", fail_attempts="0,2")
    run_dir = tmp_path / "run"
    with running(["run", str(spec)], run_dir, tmp_path) as first:
        first.wait_event(by("job_restarting", attempt=1, counts_against_budget=True), timeout=60)
        kill_coordinator_past(first, attempt=1, step=11)
    assert latest_checkpoint_step(tmp_path / "ckpt") == 10, "killed too late: step 20 passed"

    code, second = resume(run_dir, tmp_path)

    assert code == 1, second.stderr  # the chief's exit code
    events = read_events(run_dir)
    assert attempts_of(events) == [0, 1, 2]
    resumed = next(e for e in events if e["event"] == "job_resumed")
    assert (resumed["previous_attempt"], resumed["restarts_used"]) == (1, 1)
    failed = [e for e in events if e["event"] == "job_failed"]
    assert len(failed) == 1 and "gave up after 1 restart(s)" in failed[0]["reason"]
    summary = summary_of(run_dir)
    assert [(a["status"], a["counted_against_budget"]) for a in summary["attempts"]] == [
        ("failed", True), ("interrupted", False), ("failed", True)]


def test_a_stopped_coordinator_resumes_and_its_loss_uses_no_restart(tmp_path: Path) -> None:
    spec = budget_spec(tmp_path, "stopped", fail_attempts="1")
    run_dir = tmp_path / "run"
    with running(["run", str(spec)], run_dir, tmp_path) as first:
        # the checkpoint itself, not a progress event: those come once a second at most, and
        # under load the one after step 10 may come too close to step 20
        wait_for_checkpoint(tmp_path / "ckpt", 10, first, timeout=60)
        first.proc.send_signal(signal.SIGTERM)  # stopped, not killed: it records its end
        assert first.wait(30) == 128 + signal.SIGTERM
    assert latest_checkpoint_step(tmp_path / "ckpt") == 10, "stopped too late: step 20 passed"

    code, second = resume(run_dir, tmp_path)

    # attempt 1 crashes at step 15: that is the one restart allowed, attempt 2 finishes
    assert code == 0, second.stderr
    events = read_events(run_dir)
    assert attempts_of(events) == [0, 1, 2]
    resumed = next(e for e in events if e["event"] == "job_resumed")
    assert resumed["previous_coordinator"] == "was stopped by SIGTERM"
    assert (resumed["restarts_used"], resumed["resume_step"]) == (0, 10)
    summary = summary_of(run_dir)
    assert [(a["status"], a["counted_against_budget"]) for a in summary["attempts"]] == [
        ("interrupted", False), ("failed", True), ("succeeded", False)]
    assert results(run_dir, 2) == {"chief-0": ["fake_trainer chief:0 done step=30"],
                                   "worker-0": ["fake_trainer worker:0 done step=30"]}
