"""``partition:host:NAME`` on network-namespace hosts: the host is cut off mid-run (its link goes
down), tfcluster loses it and restarts the job, the drill heals the link, and the job finishes with
the baseline's result. Also: a partition of a host that is not a namespace is refused up front."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.netns.cluster import NetnsHostsFactory
from tests.support.jobs import FAKE_TRAINER, REPO, running, wait_until_gone

pytestmark = [pytest.mark.netns, pytest.mark.timeout(240)]

ARGS = ["--steps", "200", "--step-time", "0.03", "--bind", "--checkpoint-every", "10",
        "--result", "--save-on-term"]


def test_a_partitioned_host_is_lost_healed_and_the_job_matches_the_baseline(
        netns_hosts: NetnsHostsFactory, tmp_path: Path) -> None:
    cluster = netns_hosts(3)
    spec = cluster.write_spec(
        tmp_path / "spec.yaml", name="partition", checkpoint_dir=tmp_path / "ckpt",
        entrypoint={"script": str(FAKE_TRAINER), "args": ARGS},
        restart={"max_restarts": 2, "backoff_s": 0.5},
        health={"heartbeat_interval_s": 0.5, "heartbeat_timeout_s": 3, "grace_period_s": 2,
                "failure_grace_period_s": 1})
    victim = cluster["h2"]
    argv = ["drill", str(spec), "--fault", "partition:host:h2:at-step=30", "--baseline",
            "--quiet"]
    with running(argv, tmp_path / "run", REPO) as job:
        code = job.wait(200)
        assert wait_until_gone(job.mark, 10) == []
    assert code == 0, job.stdout + job.stderr
    assert victim.is_link_up()  # healed
    scenario = json.loads((tmp_path / "run" / "drill.json").read_text())["scenarios"][0]
    figures, = scenario["faults"]
    assert figures["detected_as"] == "lost_host (" + figures["detected_as"].split("(")[1]
    assert figures["detection_s"] > 0 and figures["steps_lost"] <= 10
    assert f"{victim.namespace}/" in figures["detail"]
    assert scenario["result_check"] == "match" and scenario["restarts"] >= 1
    for host in cluster:
        assert host.wait_no_processes(10) == []


def test_a_partition_of_a_host_that_is_not_a_namespace_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: p\n"
        f"entrypoint: {{script: {FAKE_TRAINER}}}\n"
        "hosts: {far: {address: 198.19.255.254}}\n"
        "tasks: [{type: worker, host: far, port: 23456}]\n")
    with running(["drill", str(spec), "--fault", "partition:host:far"], tmp_path / "run",
                 REPO) as job:
        assert job.wait(30) == 1
    assert job.stderr.splitlines() == [
        "tfcluster: partition:host:far: no network namespace here holds 198.19.255.254; "
        "partitions work on network-namespace hosts only (e.g. tests/netns)"]
    assert not (tmp_path / "run").exists()  # refused before anything ran
