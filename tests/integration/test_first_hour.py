"""A newcomer's first hour (issue 27): defaults that say what is off, mistakes caught before
anything starts, and lines that say what really happened. Real tfcluster processes over the
fake trainer (no TensorFlow)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.jobs import FAKE_TRAINER, Job, by, fake_spec, running, signal_tfcluster, write_spec

pytestmark = pytest.mark.timeout(120)


def tfcluster(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *argv], cwd=cwd, text=True,
                          capture_output=True, timeout=60, check=False,
                          env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})


def said(stderr: str, text: str) -> list[str]:
    return [line for line in stderr.splitlines() if text in line]


def every_task_trains(job: Job) -> None:
    """Both tasks past their start-up (their SIGTERM handler is set): a Ctrl-C earlier finds a
    task still starting, which exits without saving, as it should."""
    for task in ("worker:0", "worker:1"):
        job.wait_event(by("task_progress", task=task), timeout=30)


def test_local_without_flags_says_restarts_are_off_and_keeps_checkpoints_in_the_run_dir(
        tmp_path: Path) -> None:
    with running(["local", "-n", "2", "--", sys.executable, str(FAKE_TRAINER), "--steps", "4",
                  "--checkpoint-every", "2"], tmp_path / "run", tmp_path) as job:
        assert job.wait(60) == 0, job.stderr
    checkpoints = tmp_path / "run" / "checkpoints"
    assert said(job.stderr, "restarts are off") == [
        "tfcluster: restarts are off (--max-restarts 0, as in torchrun): a failed task ends the "
        f"job; --max-restarts N restarts it from the chief's latest checkpoint in {checkpoints} "
        "(TFCLUSTER_CHECKPOINT_DIR)"]
    assert (checkpoints / "ckpt-4.index").is_file()


def test_a_second_run_of_a_spec_says_it_resumes_the_earlier_checkpoints(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, fake_spec("twice", args=["--steps", "6", "--checkpoint-every", "3"],
                                          checkpoint={"dir": str(tmp_path / "ckpt")}))
    runs = []
    for name in ("first", "second"):
        with running(["run", str(spec)], tmp_path / name, tmp_path) as job:
            assert job.wait(60) == 0, job.stderr
        runs.append(job.stderr)
    assert not said(runs[0], "earlier run")
    assert said(runs[1], "earlier run") == [
        f"tfcluster: resuming the checkpoint an earlier run left in {tmp_path / 'ckpt'} at step 6: "
        "a script that restores the latest checkpoint there continues from it (remove the dir, "
        "or give another checkpoint.dir, to start fresh)"]


def test_validate_names_a_missing_script_and_an_interpreter_not_on_this_machine(
        tmp_path: Path) -> None:
    spec = write_spec(tmp_path, {"name": "typos", "entrypoint": {"script": "trian.py"},
                                 "python": "/usr/bin/python9", "tasks": [{"type": "worker"}]})
    done = tfcluster("validate", str(spec), cwd=tmp_path)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"{spec}: python: /usr/bin/python9 is not an interpreter on this machine (give the path "
        "of one, e.g. /usr/bin/python3)",
        f"{spec}: entrypoint.script: trian.py: no such file in {tmp_path} (worker:0)"]


def test_run_checks_this_machine_first_and_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        spec = write_spec(tmp_path, fake_spec(
            "notready", tasks=[{"type": "worker", "port": port}, {"type": "worker"}],
            entrypoint={"module": "no_such_module.train"},
            restart={"max_restarts": 3, "backoff_s": 0.1}))
        with running(["run", str(spec)], tmp_path / "run", tmp_path) as job:
            assert job.wait(30) == 1, job.stderr
    assert job.stderr.splitlines() == [
        f"tfcluster: localhost: entrypoint.module no_such_module.train: {sys.executable} in "
        f"{tmp_path} cannot find it (worker:0, worker:1)",
        f"tfcluster: localhost: port {port} of worker:0 in use: Address already in use",
        "tfcluster: job notready not started: nothing was launched"]
    assert not (tmp_path / "run").exists()


def test_local_names_its_flags_not_spec_fields(tmp_path: Path) -> None:
    with running(["local", "-n", "2", "--max-restarts", "1", "--", sys.executable,
                  str(FAKE_TRAINER), "--fail-task", "worker:1", "--fail-at-step", "2"],
                 tmp_path / "run", tmp_path) as job:
        assert job.wait(60) == 1, job.stderr
    assert "restart.max_restarts" not in job.stderr and "the spec" not in job.stderr
    assert said(job.stderr, "job local failed")[0].startswith(
        "tfcluster: job local failed: gave up after 1 restart(s) (--max-restarts 1)")


def test_ctrl_c_after_every_task_saved_is_a_stop_with_the_step_and_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with running(["local", "-n", "2", "--", sys.executable, str(FAKE_TRAINER), "--steps",
                  "100000", "--step-time", "0.01", "--save-on-term"], run_dir, tmp_path) as job:
        every_task_trains(job)
        signal_tfcluster(job, signal.SIGINT)
        assert job.wait(60) == 130, job.stderr
    saved = sorted((run_dir / "checkpoints").glob("ckpt-*.index"))
    assert len(saved) == 1, (saved, job.stderr)
    step = int(saved[0].name[5:-6])
    assert not said(job.stderr, "job local failed"), job.stderr
    assert said(job.stderr, "stopped by") == [
        f"tfcluster: job local stopped by SIGINT (Ctrl-C) with its checkpoints saved up to step "
        f"{step}: tfcluster run --resume {run_dir} continues from there; exit code 130"]


def test_a_refused_local_run_leaves_no_run_directory_behind(tmp_path: Path) -> None:
    """``local`` chooses its run directory (for its checkpoints) before the check of this machine;
    when the check refuses the run, neither that directory nor a ``runs/`` it made is left."""
    done = tfcluster("local", "-n", "2", "-m", "no_such_module.train", cwd=tmp_path)
    assert done.returncode == 1, done
    assert done.stderr.splitlines()[-1] == "tfcluster: job local not started: nothing was launched"
    assert list(tmp_path.iterdir()) == []


def test_resume_checks_this_machine_first_and_starts_nothing(tmp_path: Path) -> None:
    """A run stopped with Ctrl-C whose script has gone since: ``run --resume`` says so in one
    line and launches nothing (no new attempt, the checkpoint kept)."""
    script = tmp_path / "train.py"
    script.write_bytes(FAKE_TRAINER.read_bytes())
    run_dir = tmp_path / "run"
    with running(["local", "-n", "2", "--", "python3", str(script), "--steps", "100000",
                  "--step-time", "0.01", "--save-on-term"], run_dir, tmp_path) as job:
        every_task_trains(job)
        signal_tfcluster(job, signal.SIGINT)
        assert job.wait(60) == 130, job.stderr
    saved = sorted((run_dir / "checkpoints").iterdir())
    script.unlink()
    done = tfcluster("run", "--resume", str(run_dir), cwd=tmp_path)
    assert done.returncode == 1, done
    assert said(done.stderr, "localhost:") == [
        f"tfcluster: localhost: entrypoint.script {script}: no such file in {tmp_path} "
        "(worker:0, worker:1)"]
    assert done.stderr.splitlines()[-1] == "tfcluster: job local not started: nothing was launched"
    assert not (run_dir / "attempt-1").exists()
    assert sorted((run_dir / "checkpoints").iterdir()) == saved


def test_task_lines_and_tfclusters_keep_their_order_in_one_file(tmp_path: Path) -> None:
    """``tfcluster local ... > log 2>&1``: the tasks' last lines (stdout) come before tfcluster's
    line about how the job ended (stderr), as they happened."""
    run_dir = tmp_path / "run"
    with running(["local", "-n", "2", "--", sys.executable, str(FAKE_TRAINER), "--steps",
                  "100000", "--step-time", "0.01", "--save-on-term"], run_dir, tmp_path,
                 merged=True) as job:
        every_task_trains(job)
        signal_tfcluster(job, signal.SIGINT)
        assert job.wait(60) == 130, job.stdout
    lines = job.stdout.splitlines()
    saved = [i for i, line in enumerate(lines) if "preempted, saved at step" in line]
    stopped, = [i for i, line in enumerate(lines) if "stopped by SIGINT" in line]
    assert len(saved) == 2 and max(saved) < stopped, lines
