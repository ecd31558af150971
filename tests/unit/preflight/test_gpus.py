"""GPUs per task (``resources``): what ``tfcluster plan`` shows each task, what ``validate``
refuses, and what pre-flight finds with a fake ``nvidia-smi`` on PATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.spec.loading import load_spec
from tests.support.jobs import REPO, write_spec
from tests.support.planning import named_planner
from worker.agent.spares import import_env

pytestmark = pytest.mark.timeout(60)


def tfcluster(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, timeout=50, check=False, cwd=REPO,
                          env={**os.environ, **(env or {})})


def two_host_spec(tmp_path: Path, resources: dict[str, Any] | None) -> Path:
    spec: dict[str, Any] = {
        "name": "gpus",
        "entrypoint": {"module": "worker.examples.digits"},
        "checkpoint": {"dir": "/tmp/tfcluster/gpus"},
        "hosts": {"node-a": {"address": "198.18.0.2"}, "node-b": {"address": "198.18.0.3"}},
        "tasks": [{"type": "chief", "host": "node-a", "port": 2222},
                  {"type": "worker", "host": "node-a", "port": 2223},
                  {"type": "worker", "host": "node-b", "port": 2222, "count": 2}],
    }
    if resources is not None:
        spec["resources"] = resources
    return write_spec(tmp_path, spec)


def devices_by_task(plan: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    return {t["task"]: (t["host"], t["env"].get("CUDA_VISIBLE_DEVICES")) for t in plan["tasks"]}


def test_plan_gives_each_task_of_a_host_its_own_gpus(tmp_path: Path) -> None:
    done = tfcluster("plan", str(two_host_spec(tmp_path, {"gpus_per_task": 2})), "--json")
    assert done.returncode == 0, done.stderr
    assert devices_by_task(json.loads(done.stdout)) == {
        "chief:0": ("node-a", "0,1"), "worker:0": ("node-a", "2,3"),
        "worker:1": ("node-b", "0,1"), "worker:2": ("node-b", "2,3")}
    text = tfcluster("plan", str(two_host_spec(tmp_path, {"gpus_per_task": 2})))
    assert text.returncode == 0, text.stderr
    assert text.stdout.count("CUDA_VISIBLE_DEVICES=0,1") == 2
    assert text.stdout.count("CUDA_VISIBLE_DEVICES=2,3") == 2


def test_without_resources_cuda_visible_devices_is_left_alone(tmp_path: Path) -> None:
    done = tfcluster("plan", str(two_host_spec(tmp_path, None)), "--json")
    assert done.returncode == 0, done.stderr
    assert {d for _, d in devices_by_task(json.loads(done.stdout)).values()} == {None}


def test_slices_and_needs_are_the_same_for_every_attempt(tmp_path: Path) -> None:
    """Warm spares keep their import-time env (CUDA_VISIBLE_DEVICES): it must not move."""
    planner = named_planner(load_spec(two_host_spec(tmp_path, {"gpus_per_task": 1})))
    first, later = planner.plan(0), planner.plan(3)
    assert [t.env["CUDA_VISIBLE_DEVICES"] for t in first.tasks] == \
        [t.env["CUDA_VISIBLE_DEVICES"] for t in later.tasks] == ["0", "1", "0", "1"]
    assert {h.name: h.gpus_needed for h in first.hosts} == {"node-a": 2, "node-b": 2}
    # what a task's warm spare is matched on: nothing import-time differs between attempts
    for before, after in zip(first.tasks, later.tasks, strict=True):
        assert import_env.differences(before.env, after.env) == []


def test_validate_refuses_a_host_declared_with_too_few_gpus(tmp_path: Path) -> None:
    spec = two_host_spec(tmp_path, {"gpus_per_task": 2, "gpus_per_host": 8,
                                    "hosts": {"node-b": 2}})
    done = tfcluster("validate", str(spec))
    assert done.returncode == 2
    assert "resources.hosts.node-b" in done.stderr + done.stdout
    assert "host node-b has 2 GPU(s) but its 2 task(s) need 4" in done.stderr + done.stdout
    assert tfcluster("validate", str(two_host_spec(
        tmp_path, {"gpus_per_task": 2, "gpus_per_host": 4}))).returncode == 0


def test_validate_refuses_cuda_visible_devices_in_env_with_gpus_per_task(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, {"name": "gpus-env", "entrypoint": {"module": "x"},
                                 "env": {"CUDA_VISIBLE_DEVICES": "0"},
                                 "resources": {"gpus_per_task": 1},
                                 "tasks": [{"type": "worker", "count": 2}]})
    done = tfcluster("validate", str(spec))
    assert done.returncode == 2 and "env.CUDA_VISIBLE_DEVICES" in done.stderr + done.stdout


# --- pre-flight, with a fake nvidia-smi ----------------------------------------------------------

FAKE_SMI = """#!/bin/sh
# a fake nvidia-smi: GPUS lines in the --query-gpu CSV format
i=0
while [ "$i" -lt "{count}" ]; do
  echo "$i, NVIDIA Fake GPU, 16384 MiB"
  i=$((i + 1))
done
"""


def local_gpu_spec(tmp_path: Path) -> Path:
    return write_spec(tmp_path, {"name": "gpus-local", "entrypoint": {"module": "json"},
                                 "workdir": str(REPO), "resources": {"gpus_per_task": 1},
                                 "tasks": [{"type": "worker", "host": "localhost", "count": 2}]})


def fake_smi_path(tmp_path: Path, count: int) -> dict[str, str]:
    bin_dir = tmp_path / f"bin-{count}"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI.replace("{count}", str(count)))
    smi.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "NO_COLOR": "1"}


def test_preflight_refuses_a_host_with_fewer_gpus_than_its_tasks_need(tmp_path: Path) -> None:
    done = tfcluster("preflight", str(local_gpu_spec(tmp_path)),
                     env=fake_smi_path(tmp_path, 1))
    assert done.returncode != 0
    assert "GPUs: host localhost needs 2 (2 task(s) x resources.gpus_per_task), found 1" \
        in done.stdout + done.stderr
    assert "TOO FEW: 1 of 2" in done.stdout


def test_preflight_reports_the_gpus_it_found(tmp_path: Path) -> None:
    done = tfcluster("preflight", str(local_gpu_spec(tmp_path)),
                     env=fake_smi_path(tmp_path, 2))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 (NVIDIA Fake GPU), needs 2" in done.stdout
