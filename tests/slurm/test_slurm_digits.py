"""Real TensorFlow on the Slurm test cluster: ``cluster_specs/slurm-digits.yaml`` (chief + 2
workers, one per node) trains to the very same weights as the same spec run on this machine.
Run under the shared TF lock: ``flock /tmp/tfc-tf.lock .venv/bin/python -m pytest tests/slurm``."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.tfjobs import requires_tf
from tests.slurm.cluster import SlurmCluster
from tests.support.jobs import REPO, read_events

pytestmark = [pytest.mark.slurm, pytest.mark.e2e, pytest.mark.timeout(300), requires_tf]

SPEC = REPO / "cluster_specs" / "slurm-digits.yaml"
STEPS = "40"
_HASH = re.compile(r"^weights_sha256=([0-9a-f]{64})$", re.MULTILINE)


def _spec(tmp_path: Path, name: str, *, slurm: bool) -> Path:
    data: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    data["name"] = name
    data["entrypoint"]["args"] = ["--steps", STEPS, "--deterministic", "--checkpoint-every", "20"]
    data["checkpoint"] = {"dir": str(tmp_path / f"ckpt-{name}")}
    if not slurm:  # the same tasks on this machine: no allocation, no pool
        del data["slurm"], data["placement"]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _hashes(run_dir: Path) -> dict[str, set[str]]:
    tasks = {e["task"]: e["host"] for e in read_events(run_dir) if e["event"] == "task_started"}
    return {f"{task}@{host}": set(_HASH.findall(
        (run_dir / "attempt-0" / f"{task.replace(':', '-')}.log").read_text()))
        for task, host in tasks.items()}


def test_digits_on_three_slurm_nodes_trains_the_same_weights_as_locally(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    local_run, slurm_run = tmp_path / "local", tmp_path / "slurm"
    local = slurm.run([sys.executable, "-m", "launcher", "run",
                       str(_spec(tmp_path, "digits-local", slurm=False)),
                       "--run-dir", str(local_run), "--quiet"], cwd=REPO, timeout=240, check=False)
    assert local.returncode == 0, local.stderr
    on_slurm = slurm.run(["salloc", "-Q", "--nodes=3", sys.executable, "-m", "launcher", "run",
                          str(_spec(tmp_path, "digits-slurm", slurm=True)),
                          "--run-dir", str(slurm_run), "--quiet"],
                         cwd=REPO, timeout=240, check=False)
    assert on_slurm.returncode == 0, on_slurm.stderr
    expected = _hashes(local_run)
    got = _hashes(slurm_run)
    assert set(got) == {"chief:0@n1", "worker:0@n2", "worker:1@n3"}
    assert len({h for found in expected.values() for h in found}) == 1, expected
    assert {h for found in got.values() for h in found} == \
        {h for found in expected.values() for h in found}
