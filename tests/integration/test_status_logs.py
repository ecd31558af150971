"""`tfcluster status` and `tfcluster logs` read a run directory, while the job runs and after it
ended; a bad run dir, task or attempt is one clear line (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.jobs import REPO, by, fake_spec, read_events, running, write_spec

pytestmark = pytest.mark.timeout(120)


def tfcluster(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)


def restarted_spec(tmp_path: Path, steps: int, step_time: float) -> Path:
    args = ["--steps", str(steps), "--step-time", str(step_time), "--checkpoint-every", "10",
            "--fail-task", "worker:1", "--fail-at-step", "25", "--fail-mode", "exit:3",
            "--fail-attempts", "0"]
    return write_spec(tmp_path, fake_spec("browse", args=args,
                                          checkpoint={"dir": str(tmp_path / "ckpt")},
                                          restart={"max_restarts": 1, "backoff_s": 0.1}))


def resumed_at(run_dir: Path) -> int:
    """The step attempt 1 resumed from: the chief's checkpoint at step 20, or a later one when
    worker:1 started late enough (a loaded machine) for the chief to save step 30 first."""
    return int(next(e["resume_step"] for e in read_events(run_dir)
                    if e["event"] == "job_restarting"))


def test_status_and_logs_of_a_running_job_then_of_the_finished_one(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with running(["run", str(restarted_spec(tmp_path, 200, 0.05))], run_dir, REPO) as job:
        job.wait_event(lambda e: e["event"] == "task_progress" and e["attempt"] == 1
                       and e["task"] == "worker:0" and e["step"] >= 30)
        now = tfcluster("status", str(run_dir))
        assert now.returncode == 0, now.stderr
        lines = now.stdout.splitlines()
        assert lines[0].startswith("job browse: running, attempt 1 (1 restart(s))")
        assert any(line.startswith("attempt 0: restarted") and "root cause: worker:1" in line
                   and "exited 3" in line for line in lines)
        resume = resumed_at(run_dir)
        assert resume >= 20 and resume % 10 == 0  # a checkpoint the chief wrote
        assert any(line.startswith("attempt 1: running") and f"from step {resume}" in line
                   for line in lines)
        assert any(line.split()[:2] == ["worker:0", "running"] for line in lines)
        log = tfcluster("logs", str(run_dir), "worker:0")
        assert f"fake_trainer worker:0 attempt 1 starting at step {resume}" in log.stdout
        # -f follows the running task's log until the job ends
        follow = subprocess.Popen([sys.executable, "-m", "launcher", "logs", str(run_dir),
                                   "worker:0", "-f"], cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            assert job.wait(90) == 0, job.stderr
            out, _ = follow.communicate(timeout=30)
        finally:
            if follow.poll() is None:
                follow.kill()
                follow.wait(10)
        assert follow.returncode == 0
        assert out.startswith(f"fake_trainer worker:0 attempt 1 starting at step {resume}")
        assert out.rstrip().endswith("fake_trainer worker:0 done step=200")

    done = tfcluster("status", str(run_dir))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("job browse: succeeded after 2 attempt(s) in ")
    assert any(line.startswith("attempt 0: restarted") and "steps lost" in line
               for line in lines)
    assert any(line.startswith("attempt 1: succeeded") and "reached step 200" in line
               for line in lines)
    assert any(line.split()[:4] == ["worker:0", "done", "step", "200"] for line in lines)
    assert any(line.startswith("metrics: ") for line in lines)
    old = tfcluster("logs", str(run_dir), "worker:1", "--attempt", "0")
    assert "fake_trainer: failing now (exit:3)" in old.stdout
    chief = tfcluster("logs", str(run_dir))  # default: the first task (no chief: worker:0)
    assert "fake_trainer worker:0 attempt 1" in chief.stdout


def test_follow_from_the_first_attempt_moves_on_to_the_next(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with running(["run", str(restarted_spec(tmp_path, 40, 0.05))], run_dir, REPO) as job:
        job.wait_event(by("task_started", task="worker:0", attempt=0))
        follow = tfcluster("logs", str(run_dir), "worker:0", "-f", timeout=90)
        assert job.wait(60) == 0, job.stderr
    assert follow.returncode == 0, follow.stderr
    assert "attempt 0 starting at step 0" in follow.stdout
    assert f"attempt 1 starting at step {resumed_at(run_dir)}" in follow.stdout
    assert follow.stdout.rstrip().endswith("done step=40")
    assert "attempt 1 started: following" in follow.stderr


@pytest.mark.parametrize(("argv", "says"), [
    (["status", "{tmp}/nowhere"], "is not a directory"),
    (["status", "{tmp}"], "holds no run (no events.jsonl)"),
    (["logs", "{run}", "worker:7"], "no task worker:7 in attempt 0"),
    (["logs", "{run}", "--attempt", "3"], "no attempt 3 in"),
    (["logs", "{run}", "boss"], "'boss' is not a task"),
])
def test_bad_input_is_one_line(tmp_path: Path, argv: list[str], says: str) -> None:
    run = tmp_path / "run"
    (run / "attempt-0").mkdir(parents=True)
    (run / "events.jsonl").write_text('{"ts": 1.0, "event": "job_started", "job": "x"}\n')
    (run / "attempt-0" / "worker-0.log").write_text("hello\n")
    done = tfcluster(*[a.format(tmp=tmp_path, run=run) for a in argv])
    assert done.returncode == 2
    assert says in done.stderr and len(done.stderr.splitlines()) == 1
    assert "Traceback" not in done.stderr
