"""Real TensorFlow on the Slurm test cluster, TF's own preemption protocol: the PCH example
(``worker.examples.pch_digits``: PreemptionCheckpointHandler) as a submitted job, chief + 2
workers on three nodes. ``scancel --batch --signal=USR1`` (what ``--signal=B:USR1@GRACE`` sends
near the time limit) makes every task save at one agreed step; the job requeues itself and the
requeued run resumes every task at that step, in the same run directory. Run under the shared TF
lock: ``flock /tmp/tfc-tf.lock .venv/bin/python -m pytest tests/slurm``."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.tfjobs import requires_tf
from tests.slurm.cluster import SlurmCluster, _job_state, wait_for
from tests.support.jobs import REPO, read_events

pytestmark = [pytest.mark.slurm, pytest.mark.e2e, pytest.mark.timeout(300), requires_tf]

_RESUMED = re.compile(r"^\[pch (\S+)\] resumed at step (\d+)$", re.MULTILINE)
_STEP = re.compile(r"^\[pch chief:0\] step (\d+) ", re.MULTILINE)


def test_usr1_makes_every_task_save_at_one_step_and_the_requeued_job_resumes_there(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = tmp_path / "pch.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "pch", "entrypoint": {"module": "worker.examples.pch_digits",
                                      "args": ["--steps", "1000", "--termination-config"]},
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path)},  # TF's autograph files
        "checkpoint": {"dir": str(tmp_path / "ckpt")},
        "tasks": [{"type": "chief"}, {"type": "worker", "count": 2}],
        "restart": {"max_restarts": 0},
        "health": {"startup_timeout_s": None, "hang_timeout_s": None, "grace_period_s": 8},
        "slurm": {"port": 24700}}))
    run_dir = tmp_path / "runs" / "pch"
    job_id = slurm.run([sys.executable, "-m", "launcher", "submit", str(spec), "--nodes", "3",
                        "--run-dir", str(run_dir)], cwd=REPO).stdout.strip()
    chief_log = run_dir / "attempt-0" / "chief-0.log"
    wait_for("the chief to train", lambda: chief_log.exists() and [
        s for s in _STEP.findall(chief_log.read_text()) if int(s) >= 20], 150)
    slurm.run(["scancel", "--batch", "--signal=USR1", job_id])
    wait_for("the requeued job to complete", lambda: _job_state(slurm, job_id) == "COMPLETED",
             200)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded", summary
    assert summary["slurm"]["restart_count"] == 1
    events = read_events(run_dir)
    resumed_attempt = max(e["attempt"] for e in events if e["event"] == "task_started")
    logs = {t: (run_dir / f"attempt-{resumed_attempt}" / f"{t}.log").read_text()
            for t in ("chief-0", "worker-0", "worker-1")}
    steps = {task: found for task, text in logs.items() for _, found in _RESUMED.findall(text)}
    assert set(steps) == set(logs), logs
    assert len(set(steps.values())) == 1 and int(next(iter(steps.values()))) >= 20, steps
    assert [e["restart_count"] for e in events if e["event"] == "slurm_attempt"] == [0, 1]
