"""Issue 25, items 1, 8 and 13 (opening): files in shared places are hostile.

A stranger who can write a shared checkpoint directory (or anyone, or any task, who can write a run
directory) plants names there: a symlink to a victim's file, a FIFO, a symlink to ``/dev/zero``.
tfcluster must never write through them, never print what they point to, never block on them:
each is refused with one line naming the file and what to do, and the victim's file is unchanged.
Every case runs the real CLI; a hang is a failure (each command has a deadline).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.jobs import REPO, by, running, signal_tfcluster, wait_until_gone

pytestmark = pytest.mark.timeout(120)

VICTIM_TEXT = "the victim's own data: root:$6$secret-hash:19000:0:99999:7:::\n"
#: No command here may take longer (a FIFO that blocks an open would take forever).
DEADLINE_S = 60.0


def tfcluster(*argv: str, timeout: float = DEADLINE_S) -> subprocess.CompletedProcess[str]:
    """The CLI, killed (and the test failed, not hung) when it outlives ``timeout``."""
    proc = subprocess.Popen([sys.executable, "-m", "launcher", *argv], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        pytest.fail(f"tfcluster {' '.join(argv)} still running after {timeout:g}s: it hangs")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim" / "shadow"
    path.parent.mkdir()
    path.write_text(VICTIM_TEXT)
    return path


def task_script(tmp_path: Path, code: str = "pass") -> Path:
    script = tmp_path / "task.py"
    script.write_text(code + "\n")
    return script


def refusal(result: subprocess.CompletedProcess[str], path: Path, what: str) -> str:
    """The one line that refuses ``path`` (``what``: e.g. "is a symlink"); no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if str(path) in line and what in line]
    assert len(lines) == 1, result.stderr
    return lines[0]


def assert_untouched(victim: Path) -> None:
    assert victim.read_text() == VICTIM_TEXT


def planted_run_dir(tmp_path: Path) -> Path:
    """A run directory as a live run leaves it: its start event, no end, a task log."""
    run_dir = tmp_path / "run"
    (run_dir / "attempt-0").mkdir(parents=True)
    (run_dir / "events.jsonl").write_text(json.dumps(
        {"ts": 1_000_000.0, "event": "job_started", "job": "planted", "tasks": ["worker:0"]})
        + "\n")
    (run_dir / "attempt-0" / "worker-0.log").write_text("a line of the task\n")
    return run_dir


# --- item 1: never written through, never read through ---------------------------------------

def test_a_symlinked_checkpoint_lock_is_refused_and_its_target_untouched(
        tmp_path: Path, victim: Path) -> None:
    checkpoints = tmp_path / "shared-checkpoints"
    checkpoints.mkdir()
    (checkpoints / ".tfcluster.lock").symlink_to(victim)
    result = tfcluster("local", "-n", "1", "--checkpoint-dir", str(checkpoints), "--run-dir",
                       str(tmp_path / "run"), "--", sys.executable, str(task_script(tmp_path)))
    assert result.returncode != 0
    line = refusal(result, checkpoints / ".tfcluster.lock", "is a symlink")
    assert "will not write through it" in line and "remove it if it is not yours" in line
    assert_untouched(victim)
    assert (checkpoints / ".tfcluster.lock").is_symlink()


def test_a_symlinked_run_dir_lock_of_a_new_run_is_refused(tmp_path: Path, victim: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".tfcluster-run.lock").symlink_to(victim)
    result = tfcluster("local", "-n", "1", "--run-dir", str(run_dir), "--", sys.executable,
                       str(task_script(tmp_path)))
    assert result.returncode != 0
    refusal(result, run_dir / ".tfcluster-run.lock", "is a symlink")
    assert_untouched(victim)


def test_a_symlinked_run_dir_lock_is_refused_at_resume(tmp_path: Path, victim: Path) -> None:
    run_dir = tmp_path / "run"
    waits_first = task_script(tmp_path, "import os, time\n"
                              "if os.environ['TFCLUSTER_ATTEMPT'] == '0': time.sleep(60)")
    with running(["local", "-n", "1", "--", sys.executable, str(waits_first)], run_dir,
                 REPO) as job:
        job.wait_event(by("task_started"))
        signal_tfcluster(job, signal.SIGKILL)  # a coordinator that died: the run is resumable
        job.wait(30)
        assert not wait_until_gone(job.mark, 30)
    (run_dir / ".tfcluster-run.lock").unlink()
    (run_dir / ".tfcluster-run.lock").symlink_to(victim)
    result = tfcluster("run", "--resume", str(run_dir))
    assert result.returncode != 0
    refusal(result, run_dir / ".tfcluster-run.lock", "is a symlink")
    assert_untouched(victim)


def test_a_symlinked_events_file_is_refused(tmp_path: Path, victim: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "events.jsonl").symlink_to(victim)
    result = tfcluster("local", "-n", "1", "--run-dir", str(run_dir), "--", sys.executable,
                       str(task_script(tmp_path)))
    assert result.returncode != 0
    refusal(result, run_dir / "events.jsonl", "is a symlink")
    assert_untouched(victim)


def test_a_symlinked_metrics_file_is_refused_and_the_job_goes_on(
        tmp_path: Path, victim: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").symlink_to(victim)
    result = tfcluster("local", "-n", "1", "--run-dir", str(run_dir), "--", sys.executable,
                       str(REPO / "tests" / "support" / "fake_trainer.py"), "--steps", "3")
    assert result.returncode == 0, result.stderr
    line = refusal(result, run_dir / "metrics.jsonl", "is a symlink")
    assert "will not write through it" in line
    assert_untouched(victim)


def test_logs_of_a_symlinked_task_log_refuse_and_print_nothing_of_its_target(
        tmp_path: Path, victim: Path) -> None:
    run_dir = planted_run_dir(tmp_path)
    log = run_dir / "attempt-0" / "worker-0.log"
    log.unlink()
    log.symlink_to(victim)
    result = tfcluster("logs", str(run_dir), "worker:0")
    assert result.returncode != 0
    line = refusal(result, log, "is a symlink")
    assert "will not read it" in line
    assert "secret-hash" not in result.stdout + result.stderr


# --- item 8: never blocked by a FIFO ----------------------------------------------------------

def test_a_fifo_checkpoint_state_file_does_not_hang_the_job_and_is_named(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    os.mkfifo(checkpoints / "checkpoint")
    result = tfcluster("local", "-n", "1", "--max-restarts", "1", "--checkpoint-dir",
                       str(checkpoints), "--run-dir", str(tmp_path / "run"), "--",
                       sys.executable, str(task_script(tmp_path, "raise SystemExit(3)")))
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert any(str(checkpoints / "checkpoint") in line and "is a FIFO" in line
               for line in result.stderr.splitlines()), result.stderr


@pytest.mark.parametrize("name", [".tfcluster-run.lock", "summary.json"])
def test_status_on_a_fifo_in_the_run_dir_is_one_line(tmp_path: Path, name: str) -> None:
    run_dir = planted_run_dir(tmp_path)
    os.mkfifo(run_dir / name)
    result = tfcluster("status", str(run_dir))
    assert result.returncode != 0
    line = refusal(result, run_dir / name, "is a FIFO")
    assert result.stderr.strip() == line


def test_logs_of_a_fifo_task_log_is_one_line(tmp_path: Path) -> None:
    run_dir = planted_run_dir(tmp_path)
    log = run_dir / "attempt-0" / "worker-0.log"
    log.unlink()
    os.mkfifo(log)
    result = tfcluster("logs", str(run_dir), "worker:0")
    assert result.returncode != 0
    assert result.stderr.strip() == refusal(result, log, "is a FIFO")


# --- item 13 (opening): a summary that never ends ---------------------------------------------

def test_status_on_a_summary_symlinked_to_dev_zero_is_refused(tmp_path: Path) -> None:
    run_dir = planted_run_dir(tmp_path)
    (run_dir / "summary.json").symlink_to("/dev/zero")
    result = tfcluster("status", str(run_dir))
    assert result.returncode != 0
    assert "MemoryError" not in result.stderr
    assert result.stderr.strip() == refusal(result, run_dir / "summary.json", "is a symlink")
