"""Issue 7 "Supervise without harm" with real tfcluster processes: exit 143 with nothing saved
does not restart forever (A), two runs cannot share a checkpoint directory (B), run directory
problems are one clear line and never a traceback (C), and the caller's environment does not leak
tfcluster's own variables into the tasks (D)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.jobs import Job, by, fake_spec, read_events, running, wait_until_gone, write_spec
from tests.support.tiers import skip_tier

pytestmark = pytest.mark.timeout(120)

#: Job helpers build the CLI's environment from os.environ when a Job starts.
LEAKED = {"TFCLUSTER_RESUME_CHECKPOINT": "/stale/x", "TFCLUSTER_RESUME_STEP": "77",
          "TFCLUSTER_CHECKPOINT_DIR": "/stale/ckpt", "TF_CONFIG": '{"stale": true}',
          "TFCLUSTER_ATTEMPT": "9", "TFCLUSTER_JOB": "stale-job"}


def one_line(job: Job) -> str:
    """tfcluster's stderr, which must be exactly one line and no traceback."""
    lines = job.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in job.stderr, job.stderr
    return lines[0]


def tfcluster(argv: list[str], run_dir: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A tfcluster run that is refused before it starts anything, its output captured."""
    verb, *rest = argv
    return subprocess.run([sys.executable, "-m", "launcher", verb, "--run-dir", str(run_dir),
                           *rest], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "NO_COLOR": "1"}, check=False)


@contextlib.contextmanager
def tmpfs(mount_point: Path, options: str) -> Iterator[bool]:
    """A tmpfs mounted at ``mount_point`` for the time of the ``with``; False when this machine
    does not let the test mount one (not root, or no mount)."""
    mount_point.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        yield False
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
                          capture_output=True, check=False, timeout=30)
    if done.returncode != 0:
        yield False
        return
    try:
        yield True
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False, timeout=30)


# --- A: exit 143 with nothing saved --------------------------------------------------------------


@pytest.mark.parametrize("code", [143, 42])
def test_exit_code_with_nothing_saved_ends_after_max_restarts_plus_one_attempts(
        tmp_path: Path, code: int) -> None:
    """The reported command: ``tfcluster local -n 2 --max-restarts 1 -- python3 -c
    "import sys; sys.exit(143)"`` made 131 attempts in 20 s."""
    argv = ["local", "-n", "2", "--max-restarts", "1", "--",
            "python3", "-c", f"import sys; sys.exit({code})"]
    with running(argv, tmp_path / "run", tmp_path) as job:
        assert job.wait(60) == code, job.stderr
        assert wait_until_gone(job.mark, 5) == []
    events = read_events(tmp_path / "run")
    starts = [e for e in events if e["event"] == "attempt_started"]
    assert [e["attempt"] for e in starts] == [0, 1]
    restarting, = (e for e in events if e["event"] == "job_restarting")
    assert restarting["counts_against_budget"] is True and restarting["backoff_s"] == 1.0
    assert starts[1]["ts"] - restarting["ts"] >= 1.0  # backed off
    assert events[-1]["event"] == "job_failed"
    assert "gave up after 1 restart(s)" in events[-1]["reason"]
    assert "checkpoint it saved" not in job.stderr
    assert f"exit {code} but no new checkpoint: counted as a failure" in restarting["reason"]
    assert f"exit {code} but no new checkpoint: counted as a failure" in job.stderr


REPORTS_PREEMPTION = """
import sys
import worker
from worker import reporting
if worker.context().attempt == 0:
    reporting.send({"kind": "preempted", "step": 0})  # what worker.checkpointing sends on SIGTERM
    sys.exit(143)
"""

EXITS_143_ON_TERM = """
import signal, sys, time
import worker
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a wrapper whose child got SIGTERM
steps = 1000 if worker.context().attempt == 0 else 3
for step in range(1, steps + 1):
    worker.report(step)
    time.sleep(0.02)
"""


def test_a_preemption_the_task_reported_restarts_outside_the_budget(tmp_path: Path) -> None:
    script = tmp_path / "preempted.py"
    script.write_text(REPORTS_PREEMPTION)
    with running(["local", "-n", "1", "--", str(script)], tmp_path / "run", tmp_path) as job:
        assert job.wait(60) == 0, job.stderr
    restarting, = (e for e in read_events(tmp_path / "run") if e["event"] == "job_restarting")
    assert restarting["counts_against_budget"] is False
    assert "worker:0 reported a preemption" in restarting["reason"]
    assert "restarting from the beginning (no checkpoint)" in restarting["reason"]


def test_a_drill_term_is_a_preemption_notice(tmp_path: Path) -> None:
    script = tmp_path / "term.py"
    script.write_text(EXITS_143_ON_TERM)
    spec = write_spec(tmp_path, fake_spec("term", tasks=[{"type": "worker", "count": 2}],
                                          entrypoint={"script": str(script)}))
    argv = ["drill", str(spec), "--task", "worker:1", "--at-step", "3", "--fault", "term"]
    with running(argv, tmp_path / "run", tmp_path) as job:
        assert job.wait(60) == 0, job.stderr
    events = read_events(tmp_path / "run")
    assert next(e for e in events if e["event"] == "task_failed")["kind"] == "preempted"
    restarting, = (e for e in events if e["event"] == "job_restarting")
    assert restarting["counts_against_budget"] is False
    assert "the drill sent SIGTERM to worker:1" in restarting["reason"]


# --- B: one run per checkpoint directory -------------------------------------------------------


def shared_spec(tmp_path: Path, name: str, steps: int) -> Path:
    spec = fake_spec(name, args=["--steps", str(steps), "--step-time", "0.02",
                                 "--checkpoint-every", "10"],
                     tasks=[{"type": "worker", "count": 2}],
                     checkpoint={"dir": str(tmp_path / "ckpt")})
    return write_spec(tmp_path, spec)


def test_a_second_run_on_the_same_checkpoint_dir_is_refused(tmp_path: Path) -> None:
    spec = shared_spec(tmp_path, "twin", steps=300)
    with running(["run", str(spec)], tmp_path / "first", tmp_path) as first:
        first.wait_event(lambda e: e["event"] == "task_progress" and e["step"] >= 5)
        with running(["run", str(spec)], tmp_path / "second", tmp_path) as second:
            assert second.wait(30) == 1
            assert one_line(second) == (
                f"tfcluster: checkpoint dir {tmp_path / 'ckpt'} is in use by job twin (pid "
                f"{first.proc.pid} on host {socket.gethostname()}, run dir {tmp_path / 'first'}); "
                "wait for it or use another checkpoint.dir")
        assert not (tmp_path / "second").exists()  # nothing of it started
        assert first.proc.poll() is None
        assert first.wait(90) == 0, first.stderr
        assert wait_until_gone(first.mark, 5) == []
    summary = json.loads((tmp_path / "first" / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["restarts"] == 0
    state = (tmp_path / "ckpt" / "checkpoint").read_text()
    assert state.startswith('model_checkpoint_path: "ckpt-300"')
    assert (tmp_path / "ckpt" / "ckpt-300.index").exists()
    assert not (tmp_path / "ckpt" / ".tfcluster.lock").exists()


def test_the_stale_lock_of_a_sigkilled_coordinator_is_taken_over(tmp_path: Path) -> None:
    lock = tmp_path / "ckpt" / ".tfcluster.lock"
    with running(["run", str(shared_spec(tmp_path, "killed", 100000))], tmp_path / "first",
                 tmp_path) as first:
        first.wait_event(lambda e: e["event"] == "task_progress" and e["step"] >= 5)
        first.proc.kill()  # the coordinator only: its agents see EOF and stop their tasks
        first.proc.wait(10)
        assert wait_until_gone(first.mark, 15) == []
    assert json.loads(lock.read_text())["pid"] == first.proc.pid  # left behind
    with running(["run", str(shared_spec(tmp_path, "next", 20))], tmp_path / "second",
                 tmp_path) as second:
        assert second.wait(60) == 0, second.stderr
    assert (f"tfcluster: checkpoint dir {tmp_path / 'ckpt'}: taking over the stale lock of job "
            f"killed (pid {first.proc.pid} on host {socket.gethostname()}, run dir "
            f"{tmp_path / 'first'}): that run is gone") in second.stderr.splitlines()
    assert not lock.exists()


# --- C: run directory problems ---------------------------------------------------------------------

QUICK = ["local", "-n", "1", "--", "python3", "-c", "pass"]


def test_a_run_dir_that_is_a_file_is_one_clear_line(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("a file")
    with running(QUICK, target, tmp_path) as job:
        assert job.wait(30) == 1
        assert one_line(job) == (f"tfcluster: run dir {target}: is a file, not a directory "
                                 "(choose another --run-dir or remove the file)")
    assert target.read_text() == "a file"


@pytest.mark.parametrize("where", ["itself", "inside"])
def test_an_unwritable_run_dir_is_one_clear_line(tmp_path: Path, where: str) -> None:
    """Root can write anywhere a mode allows, so as root the unwritable directory is a read-only
    tmpfs (EROFS); otherwise it is a directory of mode 0500 (EACCES)."""
    locked = tmp_path / "locked"
    with tmpfs(locked, "ro,size=1m") as mounted:
        if not mounted:
            if os.geteuid() == 0:
                skip_tier("root without mount: no directory is unwritable to it")
            locked.chmod(0o500)
        target = locked if where == "itself" else locked / "run"
        problem = ("read-only file system (choose a --run-dir on a writable file system)"
                   if mounted else "permission denied (choose a --run-dir you can write to)")
        try:
            done = tfcluster(QUICK, target, tmp_path)  # its output cannot go beside the run dir
        finally:
            if not mounted:
                locked.chmod(0o700)
        assert done.returncode == 1
        assert "Traceback" not in done.stderr
        assert done.stderr.strip().splitlines() == [f"tfcluster: run dir {target}: {problem}"]


def fill(directory: Path) -> None:
    """Write into ``directory`` until its file system is full (ENOSPC)."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    chunk = b"\0" * 65536
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return
    finally:
        os.close(fd)


def test_a_disk_that_fills_up_mid_job_stops_every_task_with_one_line(tmp_path: Path) -> None:
    """ENOSPC from a real full disk: the run dir is a 2 MiB tmpfs, filled once the job runs (root
    only; tests/unit/job/test_guard_job_loop.py covers the same with /dev/full everywhere). The CLI's
    own output goes beside it (tests.support.jobs.Job), off the full disk."""
    disk = tmp_path / "small"
    with tmpfs(disk, "size=2m") as mounted:
        if not mounted:
            skip_tier("needs root and mount for a small tmpfs")
        run_dir = disk
        spec = write_spec(tmp_path, fake_spec("full", args=["--steps", "100000", "--step-time",
                                                            "0.01"]))
        with running(["run", str(spec)], run_dir, tmp_path) as job:
            job.wait_event(lambda e: e["event"] == "task_progress" and e["step"] >= 3)
            fill(disk)
            assert job.wait(60) == 1
            assert wait_until_gone(job.mark, 10) == []
            line = job.stderr.strip().splitlines()[-1]
            assert line == (f"tfcluster: run dir {run_dir}: no space left on device while "
                            f"writing {run_dir / 'events.jsonl'} (free some space or choose "
                            "another --run-dir); every task was stopped")
            assert "Traceback" not in job.stderr
            kinds = [e["event"] for e in read_events(run_dir)]
            assert kinds[0] == "job_started" and "task_progress" in kinds
            summary = run_dir / "summary.json"
            if summary.exists():  # only if the full disk still took it
                assert json.loads(summary.read_text())["status"] == "failed"


def test_reusing_a_run_dir_that_holds_a_run_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with running(["local", "-n", "1", "--name", "first", "--", "python3", "-c", "pass"],
                 run_dir, tmp_path) as job:
        assert job.wait(30) == 0, job.stderr
    before = (run_dir / "events.jsonl").read_bytes()
    started = read_events(run_dir)[0]["ts"]
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    with running(["local", "-n", "1", "--name", "second", "--", "python3", "-c", "pass"],
                 run_dir, tmp_path) as again:
        assert again.wait(30) == 1
        assert one_line(again) == (f"tfcluster: run dir {run_dir}: already holds a run (job "
                                   f"first, started {stamp}); choose another --run-dir or "
                                   "remove it")
    assert (run_dir / "events.jsonl").read_bytes() == before


# --- D: the caller's environment -----------------------------------------------------------------

PRINTS_ENV = """
import json, os, sys, time
print("ENV " + json.dumps({k: v for k, v in os.environ.items()
                           if k.startswith(("TFCLUSTER_", "TF_CONFIG", "GUARD_"))}), flush=True)
go, deadline = sys.argv[1], time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.02)  # polled against a deadline: the test inspects the agent meanwhile
"""


def task_env(job: Job) -> dict[str, Any]:
    for line in job.stdout.splitlines():
        if "ENV " in line:
            return dict(json.loads(line.split("ENV ", 1)[1]))
    raise AssertionError(f"the task printed no env; stdout:\n{job.stdout}")


@pytest.mark.parametrize("checkpoint_dir", [False, True])
def test_the_callers_tfcluster_variables_do_not_reach_the_tasks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpoint_dir: bool) -> None:
    for name, value in {**LEAKED, "GUARD_KEEP": "kept"}.items():
        monkeypatch.setenv(name, value)
    script, go = tmp_path / "env.py", tmp_path / "go"
    script.write_text(PRINTS_ENV)
    extra = ["--checkpoint-dir", str(tmp_path / "ckpt")] if checkpoint_dir else []
    with running(["local", "-n", "1", "--name", "envjob", *extra, "--", sys.executable,
                  str(script), str(go)], tmp_path / "run", tmp_path) as job:
        job.wait_event(by("task_started", task="worker:0"))
        deadline = time.monotonic() + 30
        while "ENV " not in job.stdout:
            assert time.monotonic() < deadline and job.proc.poll() is None, job.stderr
            time.sleep(0.02)
        agents = [p for p in psutil.Process(job.proc.pid).children()
                  if "worker.agent" in " ".join(p.cmdline())]
        agent_env = agents[0].environ()
        go.write_text("go")
        assert job.wait(30) == 0, job.stderr
    seen = task_env(job)
    assert seen["GUARD_KEEP"] == "kept"  # the caller's own variables still pass
    assert "TFCLUSTER_RESUME_CHECKPOINT" not in seen and "TFCLUSTER_RESUME_STEP" not in seen
    assert seen["TFCLUSTER_ATTEMPT"] == "0" and seen["TFCLUSTER_JOB"] == "envjob"
    assert json.loads(seen["TF_CONFIG"])["task"] == {"type": "worker", "index": 0}
    # the caller's is never passed on: --checkpoint-dir, or local's own in the run dir
    assert seen["TFCLUSTER_CHECKPOINT_DIR"] == str(
        tmp_path / "ckpt" if checkpoint_dir else tmp_path / "run" / "checkpoints")
    assert not set(LEAKED) & set(agent_env), "the agent itself inherited tfcluster's variables"
