"""The coordinator's stop step on the Slurm test cluster (chief + 2 workers on three nodes, the
lock-step stand-in tests/support/lockstep_watcher.py, no TensorFlow): a SIGTERM to one task on its
node, and Slurm's USR1 to the batch job (every task TERMed at once, the job requeued). Each time
every task stops after one step, through the agents srun started, and the next run resumes there."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from tests.slurm.cluster import TOKEN_VAR, SlurmCluster, _job_state, wait_for
from tests.support import procs
from tests.support.jobs import REPO, read_events

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]

LOCKSTEP = REPO / "tests" / "support" / "lockstep_watcher.py"
_STOPPED = re.compile(r"lockstep (\S+): stopped after step (\d+)")
_FROM = re.compile(r"lockstep (\S+): attempt \d+ from step (\d+)")


def spec(tmp_path: Path, name: str, port: int) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "entrypoint": {"script": str(LOCKSTEP),
                                     "args": ["--steps", "150", "--step-time", "0.03"]},
        "python": sys.executable, "workdir": str(REPO),
        "checkpoint": {"dir": str(tmp_path / "ckpt")},
        "tasks": [{"type": "chief"}, {"type": "worker", "count": 2}],
        "restart": {"max_restarts": 0, "backoff_s": 0.1}, "health": {"grace_period_s": 8},
        "slurm": {"port": port}}))
    return path


def submit(slurm: SlurmCluster, path: Path, run_dir: Path) -> str:
    return slurm.run([sys.executable, "-m", "launcher", "submit", str(path), "--nodes", "3",
                      "--run-dir", str(run_dir)], cwd=REPO).stdout.strip()


def training(run_dir: Path) -> None:
    wait_for("the tasks to train", lambda: [e for e in read_events(run_dir)
                                            if e["event"] == "task_progress" and e["step"] >= 15],
             90)


def logs(run_dir: Path, attempt: int) -> str:
    return "".join(p.read_text() for p in (run_dir / f"attempt-{attempt}").glob("*.log"))


def task_process(slurm: SlurmCluster, task: str) -> psutil.Process | None:
    for proc in procs.with_env(TOKEN_VAR, slurm.token):
        try:
            if proc.environ().get("TFCLUSTER_TASK") == task and \
                    str(LOCKSTEP) in " ".join(proc.cmdline()):
                return proc
        except psutil.Error:
            continue
    return None


def one_stop(run_dir: Path) -> int:
    stopped = dict(_STOPPED.findall(logs(run_dir, 0)))
    assert set(stopped) == {"chief:0", "worker:0", "worker:1"}, stopped
    assert len(set(stopped.values())) == 1, stopped
    return int(stopped["chief:0"])


def test_a_sigterm_to_one_task_on_its_node_stops_every_task_after_one_step(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "one"
    job_id = submit(slurm, spec(tmp_path, "one", 24800), run_dir)
    training(run_dir)
    wait_for("worker:1's process", lambda: task_process(slurm, "worker:1"), 10).terminate()
    wait_for("the job to complete", lambda: _job_state(slurm, job_id) == "COMPLETED", 90)
    step = one_stop(run_dir)
    assert {int(s) for _, s in _FROM.findall(logs(run_dir, 1))} == {step}
    assert read_events(run_dir)[-1]["event"] == "job_succeeded"


def test_usr1_to_the_batch_job_stops_every_task_after_one_step_and_the_requeued_run_resumes_there(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "usr1"
    job_id = submit(slurm, spec(tmp_path, "usr1", 24810), run_dir)
    training(run_dir)
    slurm.run(["scancel", "--batch", "--signal=USR1", job_id])
    wait_for("the requeued job to complete", lambda: _job_state(slurm, job_id) == "COMPLETED",
             120)
    step = one_stop(run_dir)
    resumed = max(e["attempt"] for e in read_events(run_dir) if e["event"] == "task_started")
    assert {int(s) for _, s in _FROM.findall(logs(run_dir, resumed))} == {step}
