"""Real GPUs (skipped, with the reason, on machines without one): a job with
``resources.gpus_per_task: 1`` on this host, one task per GPU (at most 2), and each task's
TensorFlow sees exactly one GPU, a different one per task."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.tfjobs import TEST_TIMEOUT_S, finished, requires_tf, tf_job
from tests.support.jobs import REPO, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S), requires_tf]

SCRIPT = """
import os
import tensorflow as tf
gpus = tf.config.list_physical_devices("GPU")
print(f"tf_gpus={len(gpus)} visible={os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
"""
_SEEN = re.compile(r"^tf_gpus=(\d+) visible=(\S+)$", re.MULTILINE)


def gpu_count() -> int:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
    return sum(1 for line in done.stdout.splitlines() if line.startswith("GPU ")) \
        if done.returncode == 0 else 0


def test_each_task_sees_only_its_own_gpu(tmp_path: Path) -> None:
    found = gpu_count()
    if found == 0:
        pytest.skip("no GPU here: nvidia-smi is missing or lists none")
    tasks = min(2, found)
    script = tmp_path / "gpus.py"
    script.write_text(SCRIPT)
    spec = write_spec(tmp_path, {
        "name": "gpu-slices", "entrypoint": {"script": str(script)}, "workdir": str(REPO),
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2"}, "resources": {"gpus_per_task": 1},
        "tasks": [{"type": "worker", "host": "localhost", "count": tasks}],
        "restart": {"max_restarts": 0}, "health": {"startup_timeout_s": None},
    })
    ckpt = tmp_path / "ckpt"
    with tf_job(tmp_path, ["run", str(spec)], ckpt) as job:
        pass
    run = finished(job, ckpt)
    assert run.exit_code == 0, run.stderr
    seen = {task: _SEEN.findall(text) for task, text in run.logs(0).items()}
    assert seen == {f"worker:{i}": [("1", str(i))] for i in range(tasks)}
