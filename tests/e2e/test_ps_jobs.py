"""Real TensorFlow ParameterServerStrategy jobs under ``tfcluster run``: a ClusterCoordinator
script that knows nothing of tfcluster (``tests/support/plain_ps.py``: its own checkpoints in a
directory of its own), a chief, two workers and a parameter server (tfcluster's
``python -m worker.server``).

- ``kill -9`` of worker:1 mid-run: only that worker is started again (the chief's pid never
  changes), training completes every step, exit 0, and no server is left running anywhere;
- ``kill -9`` of ps:0 mid-run: the ps and the chief come back, the chief resumes from its
  checkpoint (not from step 0), the job completes, exit 0; the workers stay up.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.tfjobs import JOB_TIMEOUT_S, TEST_TIMEOUT_S, requires_tf
from tests.support.jobs import (
    REPO,
    Event,
    Job,
    by,
    running,
    wait_for_checkpoint,
    wait_until_gone,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S), requires_tf]

PLAIN_PS = REPO / "tests" / "support" / "plain_ps.py"
STEPS = 400
_DONE = re.compile(r"^done steps=(\d+) global_step=(\d+)$", re.MULTILINE)
_RESUMED = re.compile(r"^resumed at step (\d+)", re.MULTILINE)


def ps_job(tmp_path: Path, steps: int = STEPS, **restart: Any) -> Path:
    spec: dict[str, Any] = {
        "name": "plain-ps",
        "entrypoint": {"script": str(PLAIN_PS),
                       "args": ["--steps", str(steps), "--save-every", "40",
                                "--checkpoint-dir", str(tmp_path / "own-ckpt"),
                                "--step-sleep", "0.03"]},
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path)},
        "checkpoint": {"dir": str(tmp_path / "own-ckpt")},
        "tasks": [{"type": "chief"}, {"type": "worker", "count": 2}, {"type": "ps"}],
        "restart": {"max_restarts": 2, "max_task_restarts": 3, "backoff_s": 0.5, **restart},
        "health": {"grace_period_s": 5},
    }
    path = tmp_path / "ps.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def started(events: list[Event], task: str) -> list[Event]:
    return [e for e in events if e["event"] == "task_started" and e["task"] == task]


def why_started_again(events: list[Event], job: Job) -> str:
    """What a test that counts starts shows when the count is off: every failure and restart
    the coordinator recorded, and the end of the chief's log."""
    keep = ("task_failed", "task_restarted", "task_exited", "task_left_out")
    lines = [str({k: v for k, v in e.items() if k not in ("log", "traceback")} |
                 {"traceback": str(e.get("traceback") or "")[-400:]})
             for e in events if e["event"] in keep]
    return "\n".join([*lines, "--- chief log, last lines ---", *chief_log(job).splitlines()[-25:]])


def chief_log(job: Job) -> str:
    return (job.run_dir / "attempt-0" / "chief-0.log").read_text()


def wait_for_a_saved_step(job: Job, tmp_path: Path) -> int:
    """Until the chief has saved its first checkpoint (step 40): mid-run, with something to
    resume from."""
    wait_for_checkpoint(tmp_path / "own-ckpt", 40, job, timeout=180)
    return 40


def test_a_worker_killed_is_restarted_alone_and_training_completes(tmp_path: Path) -> None:
    with running(["run", str(ps_job(tmp_path))], tmp_path / "run", tmp_path) as job:
        wait_for_a_saved_step(job, tmp_path)
        chief_pid = started(job.events(), "chief:0")[0]["pid"]
        os.kill(int(started(job.events(), "worker:1")[0]["pid"]), signal.SIGKILL)
        job.wait_event(by("task_restarted", task="worker:1"), timeout=60)
        assert job.wait(JOB_TIMEOUT_S) == 0, job.stderr
        assert not wait_until_gone(job.mark, 15), "a server outlived the job"
    events = job.events()
    assert [e["pid"] for e in started(events, "chief:0")] == [chief_pid]
    assert len(started(events, "worker:1")) == 2
    assert len(started(events, "worker:0")) == 1 and len(started(events, "ps:0")) == 1
    done = _DONE.search(chief_log(job))
    assert done is not None and int(done.group(1)) == STEPS, chief_log(job)
    assert int(done.group(2)) >= STEPS  # every scheduled step ran (a retried one may run twice)
    assert [e["event"] for e in events].count("attempt_started") == 1


def test_a_ps_killed_comes_back_with_the_chief_which_resumes(tmp_path: Path) -> None:
    with running(["run", str(ps_job(tmp_path))], tmp_path / "run", tmp_path) as job:
        saved = wait_for_a_saved_step(job, tmp_path)
        os.kill(int(started(job.events(), "ps:0")[0]["pid"]), signal.SIGKILL)
        restarted = job.wait_event(by("task_restarted", task="ps:0"), timeout=60)
        assert job.wait(JOB_TIMEOUT_S) == 0, job.stderr
        assert not wait_until_gone(job.mark, 15)
    events = job.events()
    assert restarted["together"] == ["chief:0"] and restarted["resume_step"] >= saved
    starts = {task: len(started(events, task)) for task in ("chief:0", "ps:0", "worker:0",
                                                              "worker:1")}
    assert starts == {"chief:0": 2, "ps:0": 2, "worker:0": 1, "worker:1": 1}, \
        why_started_again(events, job)
    log = chief_log(job)
    resumed = _RESUMED.search(log)
    assert resumed is not None and int(resumed.group(1)) >= saved > 0, log
    done = _DONE.search(log)
    assert done is not None and int(done.group(1)) == STEPS, log


def test_with_warm_spares_a_killed_worker_comes_back_from_a_spare(tmp_path: Path) -> None:
    """The spares fill a second after the start (the script reports no steps); by the chief's
    checkpoint at step 200 they have imported TensorFlow, and the worker's restart takes one
    (in well under the 300 steps left, at most 33 a second)."""
    spec = ps_job(tmp_path, steps=500, warm_spares=True, spare_fill_delay_s=1)
    with running(["run", str(spec)], tmp_path / "run", tmp_path) as job:
        wait_for_checkpoint(tmp_path / "own-ckpt", 200, job, timeout=180)
        os.kill(int(started(job.events(), "worker:1")[0]["pid"]), signal.SIGKILL)
        job.wait_event(by("task_restarted", task="worker:1"), timeout=60)
        assert job.wait(JOB_TIMEOUT_S) == 0, job.stderr
        assert not wait_until_gone(job.mark, 15), "a server or a spare outlived the job"
    first, again = started(job.events(), "worker:1")
    assert first["warm"] is False and again["warm"] is True, again
    done = _DONE.search(chief_log(job))
    assert done is not None and int(done.group(1)) == 500, chief_log(job)
