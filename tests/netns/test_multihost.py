"""tfcluster across hosts that have their own network addresses: network namespaces on a bridge,
each with its own sshd; the coordinator runs here and reaches them over SSH."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.tfjobs import TEST_TIMEOUT_S, finished, requires_tf, tf_job
from tests.netns.cluster import NetnsHostsFactory
from tests.support.jobs import (
    FAKE_TRAINER,
    REPO,
    by,
    read_events,
    running,
    wait_until_gone,
    write_spec,
)

pytestmark = [pytest.mark.netns]

DIGITS = ["--steps", "120", "--checkpoint-every", "40", "--deterministic"]


@requires_tf
@pytest.mark.e2e
@pytest.mark.timeout(2 * TEST_TIMEOUT_S)
def test_digits_trains_across_three_hosts_to_the_same_weights_as_locally(
        netns_hosts: NetnsHostsFactory, tmp_path: Path) -> None:
    entrypoint = {"module": "worker.examples.digits", "args": DIGITS}
    env = {"TF_CPP_MIN_LOG_LEVEL": "2"}
    local = tmp_path / "local"
    local.mkdir()
    local_spec = write_spec(local, {
        "name": "digits-local", "entrypoint": entrypoint, "env": env,
        "tasks": [{"type": "chief"}, {"type": "worker", "count": 2}]})
    with tf_job(local, ["run", str(local_spec)], local / "ckpt") as job:
        reference = finished(job, local / "ckpt")
    assert reference.exit_code == 0, reference.stderr

    cluster = netns_hosts(3)
    remote = tmp_path / "remote"
    remote.mkdir()
    spec = cluster.write_spec(remote / "spec.yaml", name="digits-hosts", entrypoint=entrypoint,
                              env={**env, "TMPDIR": str(remote)})
    with tf_job(remote, ["run", str(spec)], remote / "ckpt") as job:
        across = finished(job, remote / "ckpt")
    assert across.exit_code == 0, across.stderr
    started = {e["task"]: e["host"] for e in across.events if e["event"] == "task_started"}
    assert started == {"chief:0": "h1", "worker:0": "h2", "worker:1": "h3"}
    plan = next(e for e in across.events if e["event"] == "attempt_started")
    assert set(plan["ports"]) == {"chief:0", "worker:0", "worker:1"}
    assert across.final_hash() == reference.final_hash()
    assert all(accuracy > 0.9 for accuracy in across.accuracies().values())


def test_a_host_cut_off_mid_run_is_lost_and_the_job_recovers(
        netns_hosts: NetnsHostsFactory, tmp_path: Path) -> None:
    cluster = netns_hosts(3)
    checkpoints = tmp_path / "ckpt"
    leftover = checkpoints / "workertemp_1"  # a non-chief copy a crash left behind
    leftover.mkdir(parents=True)
    (leftover / "ckpt-5.index").write_text("stale")
    spec = cluster.write_spec(
        tmp_path / "spec.yaml", name="cutoff", checkpoint_dir=checkpoints,
        entrypoint={"script": str(FAKE_TRAINER),
                    "args": ["--steps", "150", "--step-time", "0.05", "--bind",
                             "--checkpoint-every", "10"]},
        restart={"max_restarts": 2, "backoff_s": 0.5},
        health={"heartbeat_interval_s": 0.5, "heartbeat_timeout_s": 3, "grace_period_s": 2,
                "failure_grace_period_s": 1})
    victim = cluster["h2"]
    with running(["run", str(spec)], tmp_path / "run", REPO) as job:
        job.wait_event(lambda e: e["event"] == "task_progress" and e["step"] >= 20, timeout=60)
        victim.link_down()
        lost = job.wait_event(by("task_failed", attempt=0), timeout=30)
        victim.link_up()
        assert job.wait(timeout=120) == 0, job.stderr
        assert wait_until_gone(job.mark, 10) == []
    assert lost["kind"] == "lost_host" and lost["host"] == "h2"
    events = read_events(tmp_path / "run")
    assert events[-1]["event"] == "job_succeeded"
    # the chief (h1) is remote: its checkpoints were found, and cleaned, over SFTP
    found = next(e for e in events if e["event"] == "checkpoint_found")
    assert found["step"] >= 20 and found["checkpoint"] == str(checkpoints / f"ckpt-{found['step']}")
    restart = next(e for e in events if e["event"] == "job_restarting")
    assert restart["resume_step"] == found["step"]
    assert not leftover.exists()
    assert (checkpoints / f"ckpt-{found['step']}.index").exists()
    # the old agent on h2 heard nothing from the coordinator and stopped its task by itself
    for host in cluster:
        assert host.wait_no_processes(10) == []


def test_a_host_that_stays_cut_off_fails_the_job_clearly(
        netns_hosts: NetnsHostsFactory, tmp_path: Path) -> None:
    cluster = netns_hosts(3)
    spec = cluster.write_spec(
        tmp_path / "spec.yaml", name="gone",
        entrypoint={"script": str(FAKE_TRAINER),
                    "args": ["--steps", "100000", "--step-time", "0.05", "--bind"]},
        restart={"max_restarts": 1, "backoff_s": 0.2},
        health={"heartbeat_interval_s": 0.5, "heartbeat_timeout_s": 3, "grace_period_s": 2,
                "failure_grace_period_s": 1})
    victim = cluster["h3"]
    with running(["run", str(spec), "--connect-timeout", "3"], tmp_path / "run", REPO) as job:
        job.wait_event(lambda e: e["event"] == "task_progress" and e["step"] >= 10, timeout=60)
        victim.link_down()
        assert job.wait(timeout=120) == 1, job.stderr
        assert wait_until_gone(job.mark, 10) == []
    events = read_events(tmp_path / "run")
    final = events[-1]
    assert final["event"] == "job_failed" and "gave up after 1 restart" in final["reason"]
    assert final["root_cause"]["kind"] == "lost_host" and final["root_cause"]["host"] == "h3"
    assert final["root_cause"]["attempt"] == 1  # the restart could not reach h3 either
    assert "h3" in job.stderr and "Root cause" in job.stderr
    for host in cluster:
        if host is not victim:
            assert host.wait_no_processes(10) == []
    victim.link_up()
    assert victim.wait_no_processes(20) == []  # its agent stopped its task on its own
