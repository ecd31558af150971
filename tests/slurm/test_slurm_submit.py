"""``tfcluster submit`` on a real Slurm cluster (four slurmd daemons on this host, see
tests.slurm.cluster): the batch script (dry run), a submitted job run to completion, USR1 + requeue
resuming the same run, a node lost too often excluded from the resubmitted job, and an unknown
partition as one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.slurm.cluster import SlurmCluster, _agent_on, _job_state, of, spec_file, tfcluster, wait_for
from tests.support.jobs import REPO, read_events

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(120)]


# --- bad input: one clear line each -------------------------------------------------------------


def test_unknown_partition_is_one_line(slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "part", args=[])
    done = slurm.run(tfcluster("submit", str(spec), "--nodes", "3", "--partition", "nosuch",
                               "--run-dir", str(tmp_path / "run")), check=False, cwd=REPO)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tfcluster: sbatch --parsable failed (exit 1):")
    assert "partition" in lines[0].lower()


# --- submission ----------------------------------------------------------------------------------


def test_submit_dry_run_prints_the_batch_script(slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "dry", args=[])
    run_dir = tmp_path / "runs" / "dry"
    done = slurm.run(tfcluster("submit", str(spec), "--nodes", "3", "--time", "1:00:00",
                               "--partition", "debug", "--account", "ml", "--grace", "60",
                               "--run-dir", str(run_dir), "--dry-run"), cwd=REPO)
    lines = done.stdout.splitlines()
    assert lines[:12] == [
        "#!/bin/bash",
        "#SBATCH --job-name=tfcluster-dry",
        "#SBATCH --nodes=3",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --signal=B:USR1@60",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={run_dir}/slurm-%j.out",
        f"#SBATCH --chdir={REPO}",
        "#SBATCH --time=1:00:00",
        "#SBATCH --partition=debug",
        "#SBATCH --account=ml",
    ]
    assert f"run_dir={run_dir}" in lines
    assert f"spec={spec}" in lines
    assert '  set -- run --resume "$run_dir" --quiet' in lines
    assert '  set -- run "$spec" --run-dir "$run_dir" --quiet' in lines
    assert "trap 'stopped=1; kill -USR1 \"$pid\" 2>/dev/null' USR1" in lines
    assert "trap 'kill -TERM \"$pid\" 2>/dev/null' TERM" in lines
    assert f'{sys.executable} -m launcher "$@" &' in lines
    assert '  scontrol requeue "$SLURM_JOB_ID"' in lines
    assert '  sbatch --exclude="$exclude" "$script"' in lines
    assert lines[-1] == 'exit "$rc"'
    assert not run_dir.exists()  # a dry run writes nothing


def test_a_submitted_job_runs_to_completion(slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "done", args=["--steps", "5", "--bind"])
    run_dir = tmp_path / "runs" / "done"
    done = slurm.run(tfcluster("submit", str(spec), "--nodes", "3", "--run-dir", str(run_dir)),
                     cwd=REPO)
    job_id = done.stdout.strip()
    assert job_id.isdigit()
    assert "tfcluster status" in done.stderr
    wait_for("the job to complete", lambda: _job_state(slurm, job_id) == "COMPLETED", 60)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    assert summary["slurm"]["job_id"] == job_id


def test_usr1_saves_requeues_and_resumes_the_same_run(slurm: SlurmCluster,
                                                      tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "requeue", args=["--steps", "60", "--step-time", "0.1",
                                                "--checkpoint-every", "5"],
                     checkpoint={"dir": str(tmp_path / "ckpt")})
    run_dir = tmp_path / "runs" / "requeue"
    done = slurm.run(tfcluster("submit", str(spec), "--nodes", "3", "--run-dir", str(run_dir)),
                     cwd=REPO)
    job_id = done.stdout.strip()
    wait_for("a checkpoint", lambda: [e for e in of(read_events(run_dir), "task_progress")
                                      if e["task"] == "chief:0" and e["step"] >= 12])
    slurm.run(["scancel", "--batch", "--signal=USR1", job_id])
    wait_for("the requeued job to complete", lambda: _job_state(slurm, job_id) == "COMPLETED",
             100)
    out = "\n".join(p.read_text() for p in run_dir.glob("slurm-*.out"))
    assert f"slurm job {job_id} restart 0" in out
    assert f"slurm job {job_id} restart 1" in out
    assert "stopped by Slurm; requeueing" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    assert summary["slurm"]["restart_count"] == 1
    events = read_events(run_dir)
    announced = [(e["attempt"], e["job_id"], e["restart_count"]) for e in
                 of(events, "slurm_attempt")]
    assert announced == [(0, job_id, 0), (1, job_id, 1)]
    firsts = [e for e in of(events, "task_progress") if e["first"] and e["task"] == "chief:0"]
    assert firsts[0]["step"] <= 1 and firsts[-1]["step"] >= 10  # resumed, not from the start


def test_a_node_lost_too_often_is_excluded_from_a_resubmitted_job(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "exclude", args=["--steps", "40", "--step-time", "0.05",
                                                "--checkpoint-every", "5"],
                     slurm={"max_node_failures": 1}, checkpoint={"dir": str(tmp_path / "ckpt")})
    run_dir = tmp_path / "runs" / "exclude"
    done = slurm.run(tfcluster("submit", str(spec), "--nodes", "3", "--run-dir", str(run_dir)),
                     cwd=REPO)
    first_job = done.stdout.strip()
    wait_for("progress on n2", lambda: [e for e in of(read_events(run_dir), "task_progress")
                                        if e["task"] == "worker:0" and e["step"] >= 6])
    agent = wait_for("the agent of n2", lambda: _agent_on(slurm, "n2"))
    agent.kill()
    wait_for("the first job to end", lambda: _job_state(slurm, first_job) == "COMPLETED" or
             _job_state(slurm, first_job) == "FAILED", 60)
    assert (run_dir / "slurm-exclude-nodes").read_text() == "n2\n"
    summary_path = run_dir / "summary.json"
    wait_for("the resubmitted job to succeed", lambda: summary_path.exists() and json.loads(
        summary_path.read_text())["status"] == "succeeded", 90)
    summary = json.loads(summary_path.read_text())
    assert summary["slurm"]["job_id"] != first_job
    assert summary["slurm"]["nodes"] == ["n1", "n3", "n4"]
    events = read_events(run_dir)
    assert [e["nodes"] for e in of(events, "slurm_attempt")] == [["n1", "n2", "n3"],
                                                                 ["n1", "n3", "n4"]]
    out = "\n".join(p.read_text() for p in run_dir.glob("slurm-*.out"))
    assert "submitting again without n2" in out
