"""tfcluster on a real Slurm cluster (four slurmd daemons on this host, see tests.slurm.cluster):
placement on the allocation's nodes, agents as job steps, restarts, a lost step with a spare node,
no orphans after a coordinator SIGKILL, submission, USR1 + requeue, and bad input."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.slurm.cluster import TOKEN_VAR, SlurmCluster
from tests.support import procs
from tests.support.jobs import FAKE_TRAINER, REPO, read_events
from worker.wire.module_start import START_CODE
from worker.wire.version import TFCLUSTER_VERSION

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(120)]

Event = dict[str, Any]


def spec_file(directory: Path, name: str, *, args: list[str], slurm: dict[str, Any] | None = None,
              workers: int = 2, placement: dict[str, Any] | None = None, **fields: Any) -> Path:
    """A spec on the allocation's nodes; ``slurm``: fields under the old names (``slurm:``),
    else ``placement`` (``placement:``, the fields' names now)."""
    spec: dict[str, Any] = {
        "name": name,
        "entrypoint": {"script": str(FAKE_TRAINER), "args": args},
        "tasks": [{"type": "chief"}, {"type": "worker", "count": workers}],
        "restart": {"max_restarts": 1, "backoff_s": 0.1},
        "health": {"grace_period_s": 3, "heartbeat_timeout_s": 10},
        **({"slurm": {"port": 24600, **slurm}} if slurm is not None else
           {"slurm": {}, "placement": {"port": 24600, "wait_for_hosts_s": 0,
                                       **(placement or {})}}),
        **fields,
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def tfcluster(*args: str) -> list[str]:
    return [sys.executable, "-m", "launcher", *args]


def salloc(nodes: int, *argv: str) -> list[str]:
    return ["salloc", "-Q", f"--nodes={nodes}", *argv]


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 40.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.1)  # polling files another process writes
    raise AssertionError(f"timed out waiting for {what}")


def of(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e["event"] == kind]


def hosts_of(events: list[Event], attempt: int) -> set[str]:
    return {e["host"] for e in of(events, "task_started") if e["attempt"] == attempt}


# --- bad input: one clear line each -------------------------------------------------------------


def test_outside_an_allocation_is_one_line(slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "outside", args=[])
    done = slurm.run(tfcluster("run", str(spec)), check=False, cwd=REPO)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "tfcluster: this spec places tasks on a Slurm allocation, but SLURM_JOB_ID is not set: "
        "run it inside salloc or an sbatch script, or use 'tfcluster submit'"]


def test_too_few_nodes_is_one_line(slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "few", args=[], placement={"spares": 1})
    done = slurm.run(salloc(2, *tfcluster("plan", str(spec))), check=False, cwd=REPO)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "the allocation has 2 node(s) but the spec needs 3 + 1 spare" in lines[0]
    old = spec_file(tmp_path, "old", args=[], slurm={"spare_nodes": 1})
    done = slurm.run(salloc(2, *tfcluster("plan", str(old))), check=False, cwd=REPO)
    assert done.stderr.strip().splitlines()[:2] == [
        f"tfcluster: {old}: slurm.spare_nodes is now placement.spares (slurm.spare_nodes still "
        "works)",
        f"tfcluster: {old}: slurm.port is now placement.port (slurm.port still works)"]


def test_unknown_partition_is_one_line(slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "part", args=[])
    done = slurm.run(tfcluster("submit", str(spec), "--nodes", "3", "--partition", "nosuch",
                               "--run-dir", str(tmp_path / "run")), check=False, cwd=REPO)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tfcluster: sbatch --parsable failed (exit 1):")
    assert "partition" in lines[0].lower()


# --- plan and run on the allocation ------------------------------------------------------------


def test_plan_shows_nodes_tf_config_and_srun_lines(slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "plan", args=[])
    done = slurm.run(salloc(3, *tfcluster("plan", str(spec))), cwd=REPO)
    out = done.stdout
    assert 'cluster: {"chief": ["127.0.0.1:24600"], "worker": ["127.0.0.1:24601", ' \
           '"127.0.0.1:24602"]}' in out
    for node, task in (("n1", "chief:0@127.0.0.1:24600"), ("n2", "worker:0@127.0.0.1:24601"),
                       ("n3", "worker:1@127.0.0.1:24602")):
        assert f"  {node}: {task}" in out
        assert f"host {node} (slurm node at 127.0.0.1, a job step)" in out
        assert (f"    srun --nodes=1 --ntasks=1 --nodelist={node} --overlap --kill-on-bad-exit=1 "
                f"--input=all --quiet --job-name=tfcluster-plan --chdir={tmp_path} {sys.executable} "
                f"-c {START_CODE} -m worker.agent") in out


def test_a_task_killed_on_one_node_restarts_the_whole_job_from_the_checkpoint(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "kill", args=[
        "--steps", "30", "--step-time", "0.05", "--bind", "--checkpoint-every", "2",
        "--fail-task", "worker:1", "--fail-at-step", "15", "--fail-mode", "signal:KILL",
        "--fail-attempts", "0"], checkpoint={"dir": str(tmp_path / "ckpt")})
    run_dir = tmp_path / "run"
    done = slurm.run(salloc(3, *tfcluster("run", str(spec), "--run-dir", str(run_dir),
                                          "--quiet")), check=False, cwd=REPO, timeout=100)
    assert done.returncode == 0, done.stderr
    events = read_events(run_dir)
    assert hosts_of(events, 0) == hosts_of(events, 1) == {"n1", "n2", "n3"}
    failed = of(events, "task_failed")
    assert [(f["task"], f["host"], f["kind"]) for f in failed][:1] == [
        ("worker:1", "n3", "signalled")]
    restart = of(events, "job_restarting")[0]
    assert restart["resume_step"] is not None and restart["resume_step"] >= 2
    firsts = {e["step"] for e in of(events, "task_progress") if e["attempt"] == 1 and e["first"]}
    assert firsts == {restart["resume_step"] + 1}  # every task resumed after the checkpoint
    assert of(events, "job_succeeded")


def _agent_on(slurm: SlurmCluster, node: str) -> psutil.Process | None:
    for proc in procs.with_env(TOKEN_VAR, slurm.token):
        try:
            if "worker.agent" in proc.cmdline() and proc.environ().get("SLURMD_NODENAME") == node:
                return proc
        except psutil.Error:
            continue
    return None


def test_a_lost_step_moves_the_next_attempt_to_the_spare_node(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "spare", args=["--steps", "400", "--step-time", "0.05",
                                              "--checkpoint-every", "10"],
                     slurm={"spare_nodes": 1}, checkpoint={"dir": str(tmp_path / "ckpt")},
                     restart={"max_restarts": 1, "backoff_s": 0.1})
    run_dir = tmp_path / "run"
    job = subprocess.Popen(salloc(4, *tfcluster("run", str(spec), "--run-dir", str(run_dir),
                                                "--quiet")),
                           env=slurm.env, cwd=REPO, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for("progress on n2", lambda: [e for e in of(read_events(run_dir), "task_progress")
                                            if e["task"] == "worker:0" and e["step"] >= 3])
        agent = wait_for("the agent of n2", lambda: _agent_on(slurm, "n2"))
        agent.kill()  # its step ends: for tfcluster, n2 is lost
        wait_for("attempt 1 to start", lambda: hosts_of(read_events(run_dir), 1) == {
            "n1", "n3", "n4"} or None)
        wait_for("attempt 1 to run", lambda: [e for e in of(read_events(run_dir), "task_progress")
                                              if e["attempt"] == 1])
        job.send_signal(signal.SIGINT)  # salloc passes it on; the job stops
        job.wait(60)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait(10)
    events = read_events(run_dir)
    lost = [f for f in of(events, "task_failed") if f["kind"] == "lost_host"]
    assert {f["host"] for f in lost} == {"n2"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["slurm"]["left_out"] == ["n2"]
    assert [(e["attempt"], e["nodes"], e["left_out"]) for e in of(events, "slurm_attempt")] == [
        (0, ["n1", "n2", "n3"], []), (1, ["n1", "n3", "n4"], ["n2"])]
    assert summary["slurm"]["nodes"] == ["n1", "n2", "n3", "n4"]


def test_a_lost_step_without_a_spare_shrinks_the_job_to_min_workers(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "shrink", args=["--steps", "150", "--step-time", "0.03",
                                               "--checkpoint-every", "10", "--bind"],
                     placement={"min_workers": 2}, checkpoint={"dir": str(tmp_path / "ckpt")})
    run_dir = tmp_path / "run"
    job = subprocess.Popen(salloc(3, *tfcluster("run", str(spec), "--run-dir", str(run_dir),
                                                "--quiet")),
                           env=slurm.env, cwd=REPO, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for("progress on n2", lambda: [e for e in of(read_events(run_dir), "task_progress")
                                            if e["task"] == "worker:0" and e["step"] >= 12])
        agent = wait_for("the agent of n2", lambda: _agent_on(slurm, "n2"))
        agent.kill()  # its step ends: for tfcluster, n2 is lost
        _, stderr = job.communicate(timeout=90)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait(10)
    assert job.returncode == 0, stderr
    events = read_events(run_dir)
    assert [(e["workers"], e["placement"]) for e in of(events, "attempt_placed")] == [
        (3, {"chief:0": "n1", "worker:0": "n2", "worker:1": "n3"}),
        (2, {"chief:0": "n1", "worker:0": "n3"})]
    resized, = of(events, "job_resized")
    assert (resized["workers"], resized["reason"]) == (2, "no spare for n2")
    assert "attempt 1 runs 2 of 3 workers (was 3): no spare for n2" in stderr
    firsts = [e["step"] for e in of(events, "task_progress") if e["attempt"] == 1 and e["first"]]
    assert firsts and min(firsts) > 10  # resumed from the checkpoint, at the smaller size
    assert not slurm.leftovers()


def test_coordinator_sigkill_leaves_no_task_on_any_node(slurm: SlurmCluster,
                                                         tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "orphans", args=["--steps", "1000", "--step-time", "0.05"])
    run_dir = tmp_path / "run"
    said = tmp_path / "salloc.out"
    with said.open("wb") as out:
        job = subprocess.Popen(salloc(3, *tfcluster("run", str(spec), "--run-dir", str(run_dir),
                                                    "--quiet")),
                               env=slurm.env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)

    def all_reported() -> bool:
        if job.poll() is not None:
            raise AssertionError(f"the job ended (exit {job.returncode}) before every task "
                                 f"reported: {said.read_text(errors='replace')[-2000:]}")
        return len({e["task"] for e in of(read_events(run_dir), "task_progress")}) == 3

    try:
        # the nodes' agents start as job steps: slow when the other worker runs TensorFlow
        wait_for("every task to report", all_reported, timeout=90)
        coordinator = [p for p in psutil.Process(job.pid).children()
                       if "launcher" in p.cmdline()]
        assert len(coordinator) == 1
        coordinator[0].kill()
        left = procs.wait_until_empty(lambda: [
            p for p in procs.with_env(TOKEN_VAR, slurm.token)
            if any("fake_trainer" in part or "worker.agent" in part
                   for part in _cmdline(p))], timeout=30)
        assert not left, f"left behind: {left}"
        job.wait(30)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait(10)


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


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


def _job_state(slurm: SlurmCluster, job_id: str) -> str:
    done = slurm.run(["scontrol", "show", "job", "-o", job_id], check=False)
    for item in done.stdout.split():
        if item.startswith("JobState="):
            return item.split("=", 1)[1]
    return ""


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


def test_preflight_checks_every_node_and_run_refuses_a_node_that_is_not_ready(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "ready", args=[], checkpoint={"dir": str(tmp_path / "ckpt")})
    done = slurm.run(salloc(3, *tfcluster("preflight", str(spec))), cwd=REPO)
    version = ".".join(str(v) for v in sys.version_info[:3])
    assert done.stdout.splitlines() == [
        f"n{i}: python {version}, tfcluster {TFCLUSTER_VERSION}: ok" for i in (1, 2, 3)]
    assert not list((tmp_path / "ckpt").iterdir())  # the marker is removed again
    with socket.socket() as busy:  # worker:0's port, on n2 (every node is this host)
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("", 24601))
        busy.listen()
        done = slurm.run(salloc(3, *tfcluster("run", str(spec), "--run-dir",
                                              str(tmp_path / "run"))), check=False, cwd=REPO)
    assert done.returncode == 1
    assert "pre-flight found problems on its hosts" in done.stderr
    assert f"  n2: python {version}, tfcluster {TFCLUSTER_VERSION}: port 24601 of worker:0 " \
        "in use: Address already in use" in done.stderr.splitlines()
    assert not (tmp_path / "run" / "events.jsonl").exists()
