"""A drill on a pool job with real namespace hosts and the fake trainer (no TensorFlow):
``lose-host`` takes a worker's host away, the job goes on smaller, ``heal`` gives the host back,
the job grows back, and the drill reports the sizes instead of comparing with the baseline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.netns.cluster import DEFAULT_TASK_PORT, NetnsHostsFactory
from tests.support.jobs import FAKE_TRAINER, REPO, running, wait_until_gone

pytestmark = [pytest.mark.netns, pytest.mark.timeout(240)]

ARGS = ["--steps", "400", "--step-time", "0.03", "--bind", "--checkpoint-every", "10",
        "--result", "--save-on-term"]


def test_lose_host_and_heal_shrink_and_grow_a_pool_job_and_the_drill_says_so(
        netns_hosts: NetnsHostsFactory, tmp_path: Path) -> None:
    cluster = netns_hosts(2)
    spec = cluster.write_spec(
        tmp_path / "spec.yaml", name="pooldrill", checkpoint_dir=tmp_path / "ckpt",
        entrypoint={"script": str(FAKE_TRAINER), "args": ARGS},
        tasks=[{"type": "chief"}, {"type": "worker"}],
        placement={"hosts": ["h1", "h2"], "port": DEFAULT_TASK_PORT, "min_workers": 1,
                   "readmit_after_s": 2.0},
        restart={"max_restarts": 2, "backoff_s": 0.5},
        health={"heartbeat_interval_s": 0.5, "heartbeat_timeout_s": 3, "grace_period_s": 3,
                "failure_grace_period_s": 1})
    argv = ["drill", str(spec), "--fault", "lose-host:h2:at-step=40", "--fault",
            "heal:h2:after=6", "--baseline", "--quiet"]
    with running(argv, tmp_path / "run", REPO) as job:
        code = job.wait(200)
        assert wait_until_gone(job.mark, 10) == []
    assert code == 0, job.stdout + job.stderr
    assert cluster["h2"].is_link_up()
    scenario = json.loads((tmp_path / "run" / "drill.json").read_text())["scenarios"][0]
    assert scenario["sizes"] == [2, 1, 2]
    assert scenario["result_check"] == "resized"
    assert "sizes per attempt: 2, 1, 2" in (tmp_path / "run" / "drill.md").read_text()
    for host in cluster:
        assert host.wait_no_processes(10) == []
