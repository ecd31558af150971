"""Host pools on real hosts (network namespaces, each with its own sshd) and real TensorFlow: a host
lost for good is replaced by a spare and the job ends with the weights of an uninterrupted run; with
``min_workers`` the job runs smaller without it and grows back when it returns."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.tfjobs import TEST_TIMEOUT_S, finished, requires_tf, tf_job, wait_while_running
from tests.netns.cluster import DEFAULT_TASK_PORT, NetnsCluster, NetnsHostsFactory
from tests.support.jobs import REPO, write_spec

pytestmark = [pytest.mark.netns, pytest.mark.e2e, requires_tf,
              pytest.mark.timeout(2 * TEST_TIMEOUT_S)]

PLAIN = REPO / "tests" / "support" / "plain_mwms.py"
QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2"}
FAST_LOSS = {"heartbeat_interval_s": 0.5, "heartbeat_timeout_s": 3, "grace_period_s": 5,
             "failure_grace_period_s": 1}


def pool_spec(cluster: NetnsCluster, path: Path, *, entrypoint: dict[str, Any], pool: list[str],
              health: dict[str, Any], **placement: Any) -> Path:
    return cluster.write_spec(
        path, name="pool", entrypoint=entrypoint, env={**QUIET_TF, "TMPDIR": str(path.parent)},
        tasks=[{"type": "chief"}, {"type": "worker"}],
        placement={"hosts": pool, "port": DEFAULT_TASK_PORT, **placement},
        restart={"max_restarts": 2, "backoff_s": 0.5}, health={**FAST_LOSS, **health})


def placements(events: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [e["placement"] for e in events if e["event"] == "attempt_placed"]


def test_a_spare_replaces_a_host_lost_for_good_and_the_weights_match_an_uninterrupted_run(
        netns_hosts: NetnsHostsFactory, tmp_path: Path) -> None:
    def plain(checkpoints: Path) -> dict[str, Any]:
        return {"script": str(PLAIN), "args": ["--steps", "300", "--save-every", "30",
                                               "--step-time", "0.02",
                                               "--checkpoint-dir", str(checkpoints)]}
    silent = {"startup_timeout_s": None, "hang_timeout_s": None}  # it reports no steps
    base = tmp_path / "base"
    base.mkdir()
    spec = write_spec(base, {"name": "plain", "entrypoint": plain(base / "ckpt"), "env": QUIET_TF,
                             "tasks": [{"type": "chief"}, {"type": "worker"}], "health": silent})
    with tf_job(base, ["run", str(spec)], base / "ckpt") as job:
        baseline = finished(job, base / "ckpt")
    assert baseline.exit_code == 0, baseline.stderr

    cluster = netns_hosts(3)
    work = tmp_path / "pool"
    work.mkdir()
    checkpoints = work / "ckpt"
    spec = pool_spec(cluster, work / "spec.yaml", entrypoint=plain(checkpoints),
                     pool=["h1", "h2", "h3"], health=silent)
    with tf_job(work, ["run", str(spec)], checkpoints) as job:
        wait_while_running(job, (checkpoints / "ckpt-60.index").exists,
                           "the checkpoint of step 60", 120)
        cluster["h2"].link_down()  # worker:0's host, for good
        lost_at = time.time()
        across = finished(job, checkpoints)
    assert across.exit_code == 0, across.stderr
    events = across.events
    assert placements(events) == [{"chief:0": "h1", "worker:0": "h2"},
                                  {"chief:0": "h1", "worker:0": "h3"}]
    left, = [e for e in events if e["event"] == "host_left_out"]
    assert (left["host"], left["reason"]) == ("h2", "its agent was lost")
    assert across.final_hash() == baseline.final_hash()
    summary = across.summary()
    assert [a["workers"] for a in summary["attempts"]] == [2, 2]
    started = min(e["ts"] for e in events if e["event"] == "task_started" and e["attempt"] == 1)
    print(f"host lost -> replaced attempt's tasks started: {started - lost_at:.1f}s")
    cluster["h2"].link_up()
    for host in cluster:  # h2's agent heard nothing from the coordinator and stopped its task
        assert host.wait_no_processes(20) == []


def test_without_a_spare_the_job_shrinks_and_grows_back_when_the_host_returns(
        netns_hosts: NetnsHostsFactory, tmp_path: Path) -> None:
    cluster = netns_hosts(2)
    checkpoints = tmp_path / "ckpt"
    digits = {"module": "worker.examples.digits",
              "args": ["--steps", "3000", "--checkpoint-every", "50"]}
    spec = pool_spec(cluster, tmp_path / "spec.yaml", entrypoint=digits, pool=["h1", "h2"],
                     health={}, min_workers=1, readmit_after_s=4.0)
    victim = cluster["h2"]
    with tf_job(tmp_path, ["run", str(spec)], checkpoints) as job:
        wait_while_running(job, lambda: any(
            e["event"] == "checkpoint_found" or (e["event"] == "task_progress"
                                                 and e["step"] >= 100) for e in job.events()),
            "step 100", 120)
        victim.link_down()
        lost_at = time.time()
        wait_while_running(job, lambda: any(
            e["event"] == "task_progress" and e["attempt"] == 1 for e in job.events()),
            "the smaller attempt's first step", 120)
        first_small = next(e["ts"] for e in job.events()
                            if e["event"] == "task_progress" and e["attempt"] == 1)
        victim.link_up()
        run = finished(job, checkpoints)
    assert run.exit_code == 0, run.stderr
    summary = run.summary()
    assert [a["workers"] for a in summary["attempts"]] == [2, 1, 2]
    assert summary["attempts"][1]["status"] == "resized"
    events = run.events
    assert [(e["workers"], e["previous_workers"]) for e in events
            if e["event"] == "job_resized"] == [(1, 2), (2, 1)]
    assert placements(events)[1] == {"chief:0": "h1"}
    growing = [e for e in events if e["event"] == "job_restarting"][-1]
    assert growing["counts_against_budget"] is False
    # the grow-back stop was graceful: the tasks saved where they stopped, nothing was lost
    reported = max(e["step"] for e in events if e["event"] == "task_progress"
                   and e["attempt"] == 1)
    assert growing["resume_step"] is not None and growing["resume_step"] >= reported
    assert all(accuracy > 0.9 for accuracy in run.accuracies().values())
    assert "attempt 1 runs 1 of 2 workers (was 2): no spare for h2" in run.stderr
    print(f"host lost -> first step of the smaller attempt: {first_small - lost_at:.1f}s")
    for host in cluster:
        assert host.wait_no_processes(20) == []
