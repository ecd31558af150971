"""tfcluster inside an allocation (``salloc``) on a real Slurm cluster (four slurmd daemons on
this host, see tests.slurm.cluster): the plan on the allocation's nodes, agents as job steps,
restarts, a lost step moved to a spare node or shrinking the job, no orphans after a coordinator
SIGKILL, pre-flight on every node, and bad input."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.slurm.cluster import TOKEN_VAR, SlurmCluster, _agent_on, of, spec_file, tfcluster, wait_for
from tests.support import procs
from tests.support.jobs import REPO, Event, read_events
from worker.wire.module_start import START_CODE
from worker.wire.version import TFCLUSTER_VERSION

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(120)]


def salloc(nodes: int, *argv: str) -> list[str]:
    return ["salloc", "-Q", f"--nodes={nodes}", *argv]


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


# --- pre-flight ----------------------------------------------------------------------------------


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
