"""``tfcluster doctor`` inside a real Slurm allocation: its program runs on every node as a job
step (stdin and stdout through srun, as the agents'), every node measures the shared checkpoint
dir, and nothing is left of the steps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from tests.slurm.cluster import SlurmCluster
from tests.support import procs
from tests.support.jobs import FAKE_TRAINER, REPO

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(120)]


def test_doctor_measures_every_node_through_job_steps(slurm: SlurmCluster,
                                                      tmp_path: Path) -> None:
    spec = tmp_path / "doctor.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "doctor", "entrypoint": {"script": str(FAKE_TRAINER)},
        "tasks": [{"type": "chief"}, {"type": "worker", "count": 2}],
        "checkpoint": {"dir": str(tmp_path / "ckpt")},
        "slurm": {}, "placement": {"port": 24600, "wait_for_hosts_s": 0}}))
    done = slurm.run(["salloc", "-Q", "--nodes=3", sys.executable, "-m", "launcher", "doctor",
                      "--json", str(spec)], cwd=REPO, check=False, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert [h["host"] for h in data["hosts"]] == ["n1", "n2", "n3"]
    assert all(h["problem"] is None and h["cpus"] >= 1 for h in data["hosts"])
    # every node is this host, at 127.0.0.1: three links, each measured both ways
    assert {(link["a"], link["b"]) for link in data["links"]} == {("n1", "n2"), ("n1", "n3"),
                                                                 ("n2", "n3")}
    assert all(link["mbit_s"] > 0 for link in data["links"])
    # the nodes share the checkpoint dir: each measured it
    assert [s["host"] for s in data["storage"]] == ["n1", "n2", "n3"]
    assert not (tmp_path / "ckpt").exists()
    # no step of the program outlives the run
    assert procs.wait_until_empty(
        lambda: [p for p in slurm.leftovers() if isinstance(p, psutil.Process)], 10) == []
