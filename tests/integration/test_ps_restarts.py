"""A parameter_server job's restarts with real processes and signals, no TensorFlow: the chief is
the fake trainer, the workers and the ps stand-ins for TF servers (``tests/support/
fake_server.py``, listening on their TF_CONFIG ports). What TensorFlow does with them is
``tests/e2e/test_ps_jobs.py``'s to show."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.jobs import REPO, Job, by, fake_spec, running, wait_until_gone, write_spec

pytestmark = pytest.mark.timeout(90)

FAKE_SERVER = str(REPO / "tests" / "support" / "fake_server.py")
CHIEF_ARGS = ["--steps", "40", "--step-time", "0.1", "--checkpoint-every", "5"]


def ps_spec(tmp_path: Path, *, server_args: list[str] | None = None, workers: int = 2,
            **fields: Any) -> Path:
    server = {"script": FAKE_SERVER, "args": server_args or []}
    fields = {"checkpoint": {"dir": str(tmp_path / "ckpt")},
              "restart": {"max_restarts": 2, "max_task_restarts": 3, "backoff_s": 0.2}, **fields}
    spec = fake_spec("psjob", args=CHIEF_ARGS, tasks=[
        {"type": "chief"}, {"type": "worker", "count": workers, "entrypoint": server},
        {"type": "ps", "entrypoint": server}], **fields)
    return write_spec(tmp_path, spec)


def started(job: Job, task: str) -> list[dict[str, Any]]:
    return [e for e in job.events() if e["event"] == "task_started" and e["task"] == task]


def kill_when_running(job: Job, task: str) -> int:
    """SIGKILL ``task`` once the chief has reported a step (mid-run); its pid."""
    job.wait_event(by("task_progress", task="chief:0"), timeout=30)
    pid = int(job.wait_event(by("task_started", task=task))["pid"])
    os.kill(pid, signal.SIGKILL)
    return pid


def test_a_worker_is_restarted_alone_and_the_chief_trains_on(tmp_path: Path) -> None:
    with running(["run", str(ps_spec(tmp_path))], tmp_path / "run", tmp_path) as job:
        kill_when_running(job, "worker:1")
        restarted = job.wait_event(by("task_restarted", task="worker:1"))
        assert job.wait(60) == 0, job.stderr
        assert not wait_until_gone(job.mark, 10)  # no server left running
    assert restarted["together"] == [] and restarted["restarts"] == 1
    assert len(started(job, "chief:0")) == 1  # the chief's pid never changed
    assert len(started(job, "worker:1")) == 2 and len(started(job, "worker:0")) == 1
    assert "worker:1 on localhost (attempt 0) was killed by SIGKILL; restarting it alone in " \
        "0.2s (task restart 1 of 3); the chief trains on" in job.stderr
    events = [e["event"] for e in job.events()]
    assert events.count("attempt_started") == 1 and "chief_finished" in events
    assert job.wait_event(by("job_succeeded"))
    assert "succeeded (1 attempt(s), 1 single-task restart(s))" in job.stderr
    assert "done step=40" in (tmp_path / "run" / "attempt-0" / "chief-0.log").read_text()


def test_a_ps_is_restarted_with_the_chief_which_resumes(tmp_path: Path) -> None:
    with running(["run", str(ps_spec(tmp_path))], tmp_path / "run", tmp_path) as job:
        job.wait_event(lambda e: e["event"] == "task_progress" and e["task"] == "chief:0"
                       and e["step"] >= 8)
        kill_when_running(job, "ps:0")
        restarted = job.wait_event(by("task_restarted", task="ps:0"))
        assert job.wait(60) == 0, job.stderr
    assert restarted["together"] == ["chief:0"] and restarted["resume_step"] >= 5
    assert len(started(job, "chief:0")) == 2 and len(started(job, "worker:0")) == 1
    log = (tmp_path / "run" / "attempt-0" / "chief-0.log").read_text()
    assert f"starting at step {restarted['resume_step']}" in log and "done step=40" in log
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["task_restarts"]["ps:0"]["restarts"] == 1
    assert summary["attempts"][0]["training_restarts"] == 1


def test_a_worker_in_a_crash_loop_is_left_out_and_the_job_goes_on(tmp_path: Path) -> None:
    spec = ps_spec(tmp_path, server_args=["--exit-after", "0.2", "--only-task", "worker:1"],
                   restart={"max_task_restarts": 10, "backoff_s": 0.1, "task_crash_loop": 3})
    with running(["run", str(spec)], tmp_path / "run", tmp_path) as job:
        left = job.wait_event(by("task_left_out", task="worker:1"), timeout=40)
        assert job.wait(60) == 0, job.stderr
    assert "crash loop: 3 failures in a row" in left["reason"]
    assert len(started(job, "worker:1")) == 3 and len(started(job, "chief:0")) == 1


def test_the_task_budget_ends_the_job(tmp_path: Path) -> None:
    spec = ps_spec(tmp_path, server_args=["--exit-after", "0.5", "--only-task", "worker:0"],
                   restart={"max_task_restarts": 2, "backoff_s": 0.1, "task_crash_loop": None})
    with running(["run", str(spec)], tmp_path / "run", tmp_path) as job:
        assert job.wait(60) == 1, job.stderr
        assert not wait_until_gone(job.mark, 10)
    failed = job.wait_event(by("job_failed"))
    assert "gave up after 2 single-task restart(s) (restart.max_task_restarts = 2)" \
        in failed["reason"]


def test_a_server_whose_port_went_dead_is_restarted(tmp_path: Path) -> None:
    spec = ps_spec(tmp_path, server_args=["--close-after", "1.5", "--only-task", "worker:0",
                                          "--starts-file", str(tmp_path / "starts"),
                                          "--bad-starts", "1"],
                   health={"heartbeat_interval_s": 0.3, "heartbeat_timeout_s": 5})
    with running(["run", str(spec)], tmp_path / "run", tmp_path) as job:
        failed = job.wait_event(by("task_failed"), timeout=30)
        job.wait_event(by("task_restarted", task="worker:0"))
        assert job.wait(60) == 0, job.stderr
    assert failed["task"] == "worker:0" and failed["kind"] == "server_silent"
    assert "stopped answering" in failed["message"]
    assert len(started(job, "worker:0")) == 2


def test_the_chief_started_again_with_a_ps_waits_until_the_ps_answers(tmp_path: Path) -> None:
    # A ClusterCoordinator that cannot reach a ps dies of it: started before the ps listens
    # again (TF's import takes seconds), the chief would fail a second time and spend a second
    # restart on one fault (a CI failure of tests/e2e/test_ps_jobs.py).
    spec = ps_spec(tmp_path, server_args=["--starts-file", str(tmp_path / "starts"),
                                          "--listen-after-restart", "2.5"],
                   health={"heartbeat_interval_s": 0.2})
    with running(["run", str(spec)], tmp_path / "run", tmp_path) as job:
        job.wait_event(lambda e: e["event"] == "task_progress" and e["task"] == "chief:0"
                       and e["step"] >= 8)
        kill_when_running(job, "ps:0")
        restarted = job.wait_event(by("task_restarted", task="ps:0"))
        assert job.wait(60) == 0, job.stderr
    ps_again, chief_again = started(job, "ps:0")[1], started(job, "chief:0")[1]
    assert chief_again["ts"] - ps_again["ts"] >= 2.5
    assert f"the chief resumes from step {restarted['resume_step']} once ps:0 answers" \
        in job.stderr
    assert [e["task"] for e in job.events() if e["event"] == "task_restarted"] == ["ps:0"]
