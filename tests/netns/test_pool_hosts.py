"""Host pools on real namespace hosts with the fake trainer (no TensorFlow): a host on which
attempts keep failing is left out for a spare and used again once readmitted; below the floor with
no host coming back, the job fails with one line naming the host, leaving nothing running and the
checkpoints as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.netns.cluster import DEFAULT_TASK_PORT, NetnsCluster, NetnsHostsFactory
from tests.support.jobs import FAKE_TRAINER, REPO, read_events, running, wait_until_gone

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180)]

FAST = {"heartbeat_interval_s": 0.5, "heartbeat_timeout_s": 3, "grace_period_s": 2,
        "failure_grace_period_s": 1}


def write(cluster: NetnsCluster, tmp_path: Path, args: list[str], pool: list[str],
          restart: dict[str, Any], **placement: Any) -> Path:
    return cluster.write_spec(
        tmp_path / "spec.yaml", name="poolhosts", checkpoint_dir=tmp_path / "ckpt",
        entrypoint={"script": str(FAKE_TRAINER), "args": args},
        tasks=[{"type": "chief"}, {"type": "worker"}],
        placement={"hosts": pool, "port": DEFAULT_TASK_PORT, **placement},
        restart=restart, health=FAST)


def test_a_host_failing_twice_in_a_row_is_left_out_then_used_again(
        netns_hosts: NetnsHostsFactory, tmp_path: Path) -> None:
    cluster = netns_hosts(3)
    # worker:0 fails at step 60 in attempts 0-2: on h2, h2, then the spare h3
    args = ["--steps", "80", "--step-time", "0.05", "--bind", "--fail-task", "worker:0",
            "--fail-at-step", "60", "--fail-mode", "exit:2", "--fail-attempts", "0,1,2"]
    spec = write(cluster, tmp_path, args, ["h1", "h2", "h3"],
                 {"max_restarts": 4, "backoff_s": 0.5, "crash_loop_attempts": None},
                 exclude_after_failures=2, readmit_after_s=3.0)
    with running(["run", str(spec), "--quiet"], tmp_path / "run", REPO) as job:
        code = job.wait(150)
        assert wait_until_gone(job.mark, 10) == []
    assert code == 0, job.stderr
    events = read_events(tmp_path / "run")
    assert [e["placement"]["worker:0"] for e in events if e["event"] == "attempt_placed"] == [
        "h2", "h2", "h3", "h2"]
    left, = [e for e in events if e["event"] == "host_left_out"]
    assert (left["host"], left["attempt"], left["reason"]) == (
        "h2", 2, "2 attempts in a row failed on it")
    assert [e["host"] for e in events if e["event"] == "host_readmitted"] == ["h2"]
    assert "host h2 is left out: 2 attempts in a row failed on it; probed again after 3s" \
        in job.stderr
    assert "host h2 is back (it answered its probe): usable again" in job.stderr
    for host in cluster:
        assert host.wait_no_processes(10) == []


def test_below_the_floor_with_no_host_back_the_job_fails_naming_it(
        netns_hosts: NetnsHostsFactory, tmp_path: Path) -> None:
    cluster = netns_hosts(2)
    args = ["--steps", "100000", "--step-time", "0.05", "--bind", "--checkpoint-every", "10"]
    spec = write(cluster, tmp_path, args, ["h1", "h2"], {"max_restarts": 3, "backoff_s": 0.2},
                 wait_for_hosts_s=4.0)
    checkpoints = tmp_path / "ckpt"
    victim = cluster["h2"]
    try:
        with running(["run", str(spec), "--quiet", "--connect-timeout", "3"], tmp_path / "run",
                     REPO) as job:
            job.wait_event(lambda e: e["event"] == "checkpoint_found" or (
                e["event"] == "task_progress" and e["step"] >= 25), timeout=60)
            victim.link_down()
            code = job.wait(90)
            assert wait_until_gone(job.mark, 10) == []
    finally:
        victim.link_up()
    assert code == 1, job.stderr
    ended = [line for line in job.stderr.splitlines() if "job poolhosts failed" in line]
    assert ended == [f"tfcluster: job poolhosts failed: too few usable hosts: 1 of the 2 the job "
                     f"needs at its smallest (h2: its agent was lost); exit code 1; run dir "
                     f"{tmp_path / 'run'}"]
    assert "waiting up to 4s for hosts to come back" in job.stderr
    events = read_events(tmp_path / "run")
    assert events[-1]["event"] == "job_failed" and events[-1]["exit_code"] == 1
    found = [e for e in events if e["event"] == "checkpoint_found"][-1]  # the last good one
    assert found["step"] >= 10
    assert Path(found["checkpoint"] + ".index").stat().st_size > 0  # still there, intact
    assert Path(found["checkpoint"]).parent == checkpoints
    for host in cluster:
        assert host.wait_no_processes(20) == []
