"""A preemption notice (SIGTERM to one task) at every moment of a real TensorFlow MWMS job, one
job through four attempts: during start-up (after the strategy exists, while TensorFlow's own
handler holds SIGTERM), in the middle of training steps, inside a checkpoint save, and to the other
task while the job stops between two attempts. Every time every task saves at the same step,
the job resumes from it without counting it, and the result is the uninterrupted run's weights.

Both tasks run the digits example (through tests/support/digits_term_in_save.py, which sends the
in-save notice); the coordinator chooses each stop step (worker.preemption, launcher.job.stop_step).
"""

from __future__ import annotations

import os
import re
import signal
from contextlib import suppress
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_digits import SPEC, STEPS, reference  # noqa: F401 - the shared reference run
from tests.e2e.tfjobs import (
    TEST_TIMEOUT_S,
    Finished,
    finished,
    requires_tf,
    tf_job,
    wait_while_running,
)
from tests.support.jobs import REPO, Job, by
from worker.wire.env import PREEMPTION_EXIT_CODE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S), requires_tf]

_PREEMPTED = re.compile(r"^\[digits \S+\] preempted: checkpoint saved at step (\d+)", re.MULTILINE)


def term(job: Job, task: str, attempt: int) -> None:
    pid = job.wait_event(by("task_started", task=task, attempt=attempt), timeout=60)["pid"]
    with suppress(ProcessLookupError):  # between attempts it may have exited already
        os.kill(pid, signal.SIGTERM)


def log_says(job: Job, attempt: int, task: str, text: str) -> bool:
    path = job.run_dir / f"attempt-{attempt}" / f"{task.replace(':', '-')}.log"
    return path.exists() and text in path.read_text(errors="replace")


def test_a_notice_at_any_moment_stops_every_task_at_one_step_and_loses_nothing(
        tmp_path: Path, reference: Finished) -> None:  # noqa: F811
    spec = yaml.safe_load(SPEC.read_text())
    spec["entrypoint"] = {"module": "tests.support.digits_term_in_save",
                          "args": spec["entrypoint"]["args"]}
    spec["workdir"] = str(REPO)
    spec["env"]["TEST_TERM_IN_SAVE"] = "worker:0@2"
    path = tmp_path / "moments.yaml"
    path.write_text(yaml.safe_dump(spec))
    ckpt = tmp_path / "ckpt"
    with tf_job(tmp_path, ["run", str(path)], ckpt) as job:
        # attempt 0, start-up: the strategy exists (TF's SIGTERM handler is in place), no step yet
        wait_while_running(job, lambda: log_says(job, 0, "worker:1", "] cluster {"),
                           "worker:1 built its strategy", 120)
        term(job, "worker:1", 0)
        # attempt 1, mid-step
        job.wait_event(lambda e: e["event"] == "task_progress" and e["attempt"] == 1
                       and e["step"] >= 40, timeout=120)
        term(job, "worker:0", 1)
        # attempt 2: worker:0 sends itself the notice inside its first save; then, while every
        # task stops, a notice to worker:1 as well
        job.wait_event(by("task_preempted", attempt=2), timeout=120)
        term(job, "worker:1", 2)
    run = finished(job, ckpt)
    assert run.exit_code == 0, run.stderr
    events = run.events
    stops = []
    for attempt in range(3):
        stopped = {task: [int(s) for s in _PREEMPTED.findall(text)]
                   for task, text in run.logs(attempt).items()}
        step = stopped["worker:0"][0] if stopped["worker:0"] else None
        assert stopped == {"worker:0": [step], "worker:1": [step]}, (attempt, stopped)
        assert step is not None
        exits = [e for e in events if e["event"] in ("task_failed", "task_exited")
                 and e["attempt"] == attempt]
        assert len(exits) == 2 and all(e.get("kind", "preempted") == "preempted" for e in exits)
        # 143, or (the notice to the stopping task) SIGTERM after it had saved: the same stop
        assert all(e["exit_code"] == PREEMPTION_EXIT_CODE or e["signal"] == "SIGTERM"
                   for e in exits), exits
        restart = next(e for e in events if e["event"] == "job_restarting"
                       and e["attempt"] == attempt + 1)
        assert restart["resume_step"] == step and restart["counts_against_budget"] is False
        assert run.first_steps(attempt + 1) == {step + 1}
        assert run.summary()["attempts"][attempt]["steps_lost"] == 0
        stops.append(step)
    # start-up: the first step a notice can stop at, or later when TF's listener posted the
    # notice after training began (it can take a second under load): kept either way
    assert stops[0] >= 2
    assert stops[0] < stops[1] < stops[2] < STEPS
    assert "SIGTERM to myself in the save at step" in run.log(2, "worker:0")
    assert events[-1]["event"] == "job_succeeded" and run.last_attempt() == 3
    assert run.final_hash() == reference.final_hash()
