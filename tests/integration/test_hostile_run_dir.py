"""A run directory as a crash, a reboot or a careless hand leaves it, read back by the real CLI
(issue 25, items 4, 13, 14, 17): a run whose coordinator was SIGKILLed and whose events.jsonl then
got a torn, NUL-padded tail still resumes from its checkpoint; ``status`` on lines and summaries of
the wrong type answers (exit 0, no traceback); ``logs -f`` of a run whose coordinator is gone
ends."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import procs
from tests.support.jobs import FAKE_TRAINER, REPO, read_events, running, wait_until_gone
from tests.support.run_dirs import lost_run, replace_line

pytestmark = pytest.mark.timeout(120)

#: Slow enough steps that the coordinator is killed between two checkpoints.
TRAIN = ["--steps", "30", "--step-time", "0.15", "--checkpoint-every", "10"]


def tfcluster(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_a_run_with_a_torn_nul_padded_tail_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    argv = ["local", "-n", "2", "--chief", "--name", "torn", "--checkpoint-dir", str(ckpt),
            "--", str(FAKE_TRAINER), *TRAIN]
    with running(argv, run_dir, tmp_path) as first:
        first.wait_event(lambda e: e["event"] == "task_progress" and e["task"] == "chief:0"
                         and e["step"] >= 12, timeout=60)
        pids = [e["pid"] for e in first.events() if e["event"] == "task_started"]
        first.proc.send_signal(signal.SIGKILL)
        assert first.proc.wait(10) == -signal.SIGKILL
        assert procs.wait_until_empty(lambda: procs.alive(procs.by_pid(pids)), 5) == []
        assert wait_until_gone(first.mark, 5) == []
    state = (ckpt / "checkpoint").read_text()
    step = int(re.findall(r'"ckpt-(\d+)"', state)[0])
    assert step >= 10
    with (run_dir / "events.jsonl").open("ab") as handle:  # what a crash, then a reboot, leave
        handle.write(b'{"ts": 1.5, "event": "task_progress", "attempt": 0, "ta' + b"\0" * 4096)
    assert "continue it with tfcluster run --resume" in tfcluster("status", str(run_dir)).stdout

    with running(["run", "--resume", str(run_dir)], run_dir, tmp_path) as second:
        assert second.wait(60) == 0, second.stderr
        assert wait_until_gone(second.mark, 5) == []
    assert "skipped 1 torn line(s)" in second.stderr
    assert len([line for line in second.stderr.splitlines() if "torn line" in line]) == 1
    events = read_events(run_dir)
    resumed = next(e for e in events if e["event"] == "job_resumed")
    assert resumed["resume_step"] == step  # from its checkpoint, not from step 0
    assert f"starting at step {step}" in (run_dir / "attempt-1" / "chief-0.log").read_text()
    assert events[-1]["event"] == "job_succeeded"


def test_status_on_lines_of_the_wrong_type_answers_and_resume_refuses_in_one_line(
        tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    lost_run(run_dir, tmp_path / "ckpt")
    replace_line(run_dir, 2, {"ts": "x", "event": "attempt_started", "attempt": 0,
                              "resume_step": "abc"})
    (run_dir / "summary.json").write_bytes(b"\xff\xfe not UTF-8")
    status = tfcluster("status", str(run_dir))
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    assert "events.jsonl: skipped 1 line(s)" in status.stdout and "(line 2: " in status.stdout
    assert "summary.json: not a summary" in status.stdout
    resume = tfcluster("run", "--resume", str(run_dir))
    assert resume.returncode == 1 and "Traceback" not in resume.stderr
    assert len(resume.stderr.splitlines()) == 1, resume.stderr
    assert "events.jsonl:2: attempt_started.ts: expected a time, got 'x'" in resume.stderr
    assert "correct or delete that line, then resume again" in resume.stderr


def test_logs_follow_of_a_run_whose_coordinator_is_gone_ends(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    lost_run(run_dir, tmp_path / "ckpt")
    follow = tfcluster("logs", str(run_dir), "worker:1", "-f", timeout=20)
    assert follow.returncode == 0, follow.stderr
    assert follow.stdout == "worker:1 attempt 1 line 1\nworker:1 attempt 1 line 2\n"
    assert "the run's coordinator is gone" in follow.stderr
