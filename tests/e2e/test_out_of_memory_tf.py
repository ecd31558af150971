"""TensorFlow running out of memory, named: a task whose allocation fails with TF's own
``ResourceExhaustedError`` (``OOM when allocating``: on a GPU the usual way to run out, here a
tensor of 4 TiB on the CPU) fails with kind ``out_of_memory``, the exception's line, its peak RSS
and the three remedies, on the console and in ``task_failed``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.tfjobs import TEST_TIMEOUT_S, requires_tf
from tests.support.jobs import by, running, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S), requires_tf]

GREEDY = "import tensorflow as tf\nprint('allocating', flush=True)\ntf.zeros([2**40])\n"


def test_a_resource_exhausted_error_is_reported_out_of_memory(tmp_path: Path) -> None:
    script = tmp_path / "greedy_tf.py"
    script.write_text(GREEDY)
    spec = {"name": "tf-oom", "entrypoint": {"script": str(script)},
            "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path)},
            "tasks": [{"type": "worker", "count": 1}], "restart": {"max_restarts": 0}}
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        assert job.wait(120) == 1, job.stderr
        failed = job.wait_event(by("task_failed", task="worker:0"))
    assert failed["kind"] == "out_of_memory" and failed["exit_code"] == 1
    message = failed["message"]
    assert message.startswith("ran out of memory: ResourceExhaustedError: OOM when allocating "
                              "tensor with shape[1099511627776] and type float (peak RSS "), message
    assert "peak RSS " in message and "peak RSS unknown" not in message
    assert "mixed_float16" in message and "smaller per-replica batch size" in message
    root = job.stderr.split("Root cause", 1)[1].splitlines()[0]
    assert "worker:0 on localhost (attempt 0) ran out of memory: ResourceExhaustedError" in root
