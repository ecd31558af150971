"""A ParameterServerStrategy job over SSH on real hosts (network namespaces, each with its own
sshd) and real TensorFlow: the chief and the ps on h1, a worker on each of h2 and h3, all running
``tests/support/plain_ps.py`` / ``python -m worker.server``. ``kill -9`` of worker:1 on h3: only
it is started again (through h3's agent, same address), the chief trains on and completes every
step, exit 0, and no process of the job is left on any host."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from tests.e2e.tfjobs import TEST_TIMEOUT_S, finished, requires_tf, tf_job, wait_while_running
from tests.netns.cluster import DEFAULT_TASK_PORT, NetnsHostsFactory

pytestmark = [pytest.mark.netns, pytest.mark.e2e, requires_tf,
              pytest.mark.timeout(TEST_TIMEOUT_S)]

PLAIN_PS = Path(__file__).resolve().parents[1] / "support" / "plain_ps.py"
STEPS = 300
_DONE = re.compile(r"^done steps=(\d+) global_step=(\d+)$", re.MULTILINE)


def test_a_worker_killed_on_its_host_is_restarted_alone_over_ssh(
        netns_hosts: NetnsHostsFactory, tmp_path: Path) -> None:
    cluster = netns_hosts(3)
    checkpoints = tmp_path / "own-ckpt"
    spec = cluster.write_spec(
        tmp_path / "ps.yaml", name="ps-netns",
        entrypoint={"script": str(PLAIN_PS),
                    "args": ["--steps", str(STEPS), "--save-every", "30", "--step-sleep", "0.03",
                             "--checkpoint-dir", str(checkpoints)]},
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path)},
        tasks=[{"type": "chief", "host": "h1", "port": DEFAULT_TASK_PORT},
               {"type": "worker", "host": "h2", "port": DEFAULT_TASK_PORT},
               {"type": "worker", "host": "h3", "port": DEFAULT_TASK_PORT},
               {"type": "ps", "host": "h1", "port": DEFAULT_TASK_PORT + 1}],
        restart={"max_restarts": 2, "max_task_restarts": 3, "backoff_s": 0.5},
        health={"grace_period_s": 5})
    with tf_job(tmp_path, ["run", str(spec)], checkpoints) as job:
        wait_while_running(job, (checkpoints / "ckpt-30.index").exists,
                           "the chief's checkpoint of step 30", 180)
        worker1 = next(e for e in job.events()
                       if e["event"] == "task_started" and e["task"] == "worker:1")
        assert worker1["host"] == "h3"
        os.kill(int(worker1["pid"]), signal.SIGKILL)
        done = finished(job, checkpoints)
    assert done.exit_code == 0, done.stderr
    started = [e["task"] for e in done.events if e["event"] == "task_started"]
    assert sorted(started) == ["chief:0", "ps:0", "worker:0", "worker:1", "worker:1"]
    restarted, = [e for e in done.events if e["event"] == "task_restarted"]
    assert (restarted["task"], restarted["host"], restarted["together"]) == ("worker:1", "h3", [])
    log = done.log(0, "chief:0")
    found = _DONE.search(log)
    assert found is not None and int(found.group(1)) == STEPS, log
    for host in cluster:
        assert host.wait_no_processes(20) == []
