"""Fault tolerance with the fake trainer: real processes, real signals, real files."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.jobs import (
    Job,
    by,
    fake_spec,
    read_events,
    running,
    wait_for_checkpoint,
    wait_until_gone,
    write_spec,
)

pytestmark = pytest.mark.timeout(120)

TRAIN = ["--steps", "60", "--step-time", "0.03", "--checkpoint-every", "10"]
#: Slow enough that ckpt-40 comes 0.5 s after ckpt-30: the time to spoil ckpt-30 and kill a task.
TRAIN_SLOWER = ["--steps", "60", "--step-time", "0.05", "--checkpoint-every", "10"]


def job_spec(tmp_path: Path, name: str, args: list[str], **fields: Any) -> dict[str, Any]:
    fields.setdefault("checkpoint", {"dir": str(tmp_path / "ckpt")})
    fields.setdefault("restart", {"max_restarts": 2, "backoff_s": 0.1})
    return fake_spec(name, args=args, **fields)


def start(tmp_path: Path, spec: dict[str, Any]) -> tuple[list[str], Path]:
    return ["run", str(write_spec(tmp_path, spec))], tmp_path / "run"


def kill_when_past(job: Job, task: str, step: int, sig: signal.Signals) -> float:
    """Send ``sig`` to ``task`` once it has reported ``step``; returns when it was sent."""
    pid = job.wait_event(by("task_started", task=task, attempt=0))["pid"]
    job.wait_event(lambda e: e["event"] == "task_progress" and e["task"] == task
                   and e["step"] >= step)
    sent = time.time()
    os.kill(pid, sig)
    return sent


def first_steps(events: list[dict[str, Any]], attempt: int) -> set[int]:
    return {e["step"] for e in events if e["event"] == "task_progress" and e["attempt"] == attempt
            and e["first"]}


def test_sigkill_of_a_worker_restarts_the_job_from_the_last_checkpoint(tmp_path: Path) -> None:
    argv, run_dir = start(tmp_path, job_spec(tmp_path, "kill", TRAIN))
    with running(argv, run_dir, tmp_path) as job:
        kill_when_past(job, "worker:1", 25, signal.SIGKILL)
        assert job.wait() == 0, job.stderr
        assert wait_until_gone(job.mark, 5) == []
    events = read_events(run_dir)
    failed = next(e for e in events if e["event"] == "task_failed")
    assert (failed["task"], failed["signal"]) == ("worker:1", "SIGKILL")
    found = next(e for e in events if e["event"] == "checkpoint_found")
    assert found["step"] >= 20 and found["checkpoint"].endswith(f"ckpt-{found['step']}")
    restart = next(e for e in events if e["event"] == "job_restarting")
    assert restart["resume_step"] == found["step"] and restart["counts_against_budget"]
    assert first_steps(events, 1) == {found["step"] + 1}  # every task resumed there
    summary = json.loads((run_dir / "summary.json").read_text())
    first = summary["attempts"][0]
    assert first["root_cause"]["task"] == "worker:1"
    # the step every task had reached, as reported: a task's reports go out batched (every 0.25 s),
    # so the killed one's last few steps were never seen; the others may be seen further
    assert first["steps_lost"] == max(0, first["reached_step"] - found["step"])
    assert first["reached_step"] <= first["max_step"]
    assert 0 < first["recovery_s"] < 30
    assert summary["status"] == "succeeded" and summary["restarts"] == 1


def test_a_task_failing_every_attempt_gives_up_after_max_restarts(tmp_path: Path) -> None:
    # no checkpoints: with one at step 10, a worker:2 that started late (the host's start-up
    # slots, a loaded machine) would fail after it, and the next attempt would resume past step 3
    argv, run_dir = start(tmp_path, job_spec(
        tmp_path, "always", ["--steps", "60", "--step-time", "0.03",
                             "--fail-task", "worker:2", "--fail-at-step", "3"],
        restart={"max_restarts": 2, "backoff_s": 0.05, "crash_loop_attempts": None}))
    with running(argv, run_dir, tmp_path) as job:
        assert job.wait() == 1
        assert wait_until_gone(job.mark, 5) == []
    events = read_events(run_dir)
    assert [e["attempt"] for e in events if e["event"] == "attempt_started"] == [0, 1, 2]
    final = events[-1]
    assert final["event"] == "job_failed" and "gave up after 2 restart(s)" in final["reason"]
    assert final["root_cause"]["task"] == "worker:2"
    backoffs = [e["backoff_s"] for e in events if e["event"] == "job_restarting"]
    assert backoffs == [0.05, 0.1]  # exponential


def test_a_crash_loop_without_checkpoint_progress_stops_early(tmp_path: Path) -> None:
    argv, run_dir = start(tmp_path, job_spec(
        tmp_path, "loop", [*TRAIN, "--fail-task", "worker:0", "--fail-at-step", "2"],
        restart={"max_restarts": 10, "backoff_s": 0.05, "crash_loop_attempts": 2}))
    with running(argv, run_dir, tmp_path) as job:
        assert job.wait() == 1
    events = read_events(run_dir)
    assert len([e for e in events if e["event"] == "attempt_started"]) == 2
    assert "crash loop" in events[-1]["reason"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "crash loop" in summary["reason"]


def test_a_preempted_attempt_does_not_use_up_the_budget(tmp_path: Path) -> None:
    argv, run_dir = start(tmp_path, job_spec(
        tmp_path, "preempt", [*TRAIN, "--fail-task", "all", "--fail-at-step", "26",
                              "--fail-mode", "preempt", "--fail-attempts", "0"],
        restart={"max_restarts": 0, "backoff_s": 5}))
    with running(argv, run_dir, tmp_path) as job:
        assert job.wait() == 0, job.stderr
    events = read_events(run_dir)
    failed = next(e for e in events if e["event"] == "task_failed")
    assert failed["kind"] == "preempted"
    restart = next(e for e in events if e["event"] == "job_restarting")
    assert restart["counts_against_budget"] is False and restart["backoff_s"] == 0
    assert restart["resume_step"] == 25  # the step the tasks stopped at: nothing lost
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["attempts"][0]["steps_lost"] == 0


def test_a_stopped_worker_is_detected_as_hung_and_its_stacks_are_logged(tmp_path: Path) -> None:
    hang = 2.0
    argv, run_dir = start(tmp_path, job_spec(
        tmp_path, "hang", ["--steps", "200", "--step-time", "0.02", "--checkpoint-every", "10"],
        health={"hang_timeout_s": hang, "grace_period_s": 2}))
    with running(argv, run_dir, tmp_path) as job:
        stopped_at = kill_when_past(job, "worker:1", 15, signal.SIGSTOP)
        failed = job.wait_event(by("task_failed", attempt=0), timeout=hang + 10)
        assert job.wait() == 0, job.stderr
        assert wait_until_gone(job.mark, 5) == []
    assert failed["task"] == "worker:1" and failed["kind"] == "hung"
    assert failed["observed_at"] - stopped_at <= hang + 2
    for task in ("worker-0", "worker-1", "worker-2"):
        log = (run_dir / "attempt-0" / f"{task}.log").read_text()
        assert "most recent call first" in log, f"no stack dump in {task}.log"
        assert "fake_trainer.py" in log
    assert read_events(run_dir)[-1]["event"] == "job_succeeded"


def test_a_hung_task_whose_stack_dump_is_slow_is_killed_only_once_the_dump_is_written(
        tmp_path: Path) -> None:
    # worker:1 hangs with the dump signal blocked and serves it 2 s after it arrives (a dump that
    # a loaded machine makes slow): the attempt is not killed in the middle of it, or before it
    argv, run_dir = start(tmp_path, job_spec(
        tmp_path, "slowdump", ["--steps", "100", "--step-time", "0.02", "--fail-task", "worker:1",
                               "--fail-at-step", "15", "--fail-mode", "hang-slow-dump:2",
                               "--fail-attempts", "0"],
        health={"hang_timeout_s": 1.0, "grace_period_s": 2}))
    with running(argv, run_dir, tmp_path) as job:
        failed = job.wait_event(by("task_failed", attempt=0), timeout=15)
        stopping = job.wait_event(by("job_stopping", attempt=0), timeout=15)
        assert job.wait() == 0, job.stderr
        assert wait_until_gone(job.mark, 5) == []
    assert (failed["task"], failed["kind"]) == ("worker:1", "hung")
    log = (run_dir / "attempt-0" / "worker-1.log").read_text()
    assert "most recent call first" in log and " in fail\n" in log and " in main\n" in log, log
    assert stopping["ts"] - failed["ts"] >= 2.0  # the stop waited for the dump
    assert "did not finish writing its stacks" not in job.stderr


def test_a_corrupted_latest_checkpoint_falls_back_to_the_one_before(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    argv, run_dir = start(tmp_path, job_spec(tmp_path, "corrupt", TRAIN_SLOWER))
    with running(argv, run_dir, tmp_path) as job:
        pid = job.wait_event(by("task_started", task="worker:1"))["pid"]
        wait_for_checkpoint(ckpt, 30, job)
        os.truncate(ckpt / "ckpt-30.data-00000-of-00001", 0)
        os.kill(pid, signal.SIGKILL)
        assert job.wait() == 0, job.stderr
    found = next(e for e in read_events(run_dir) if e["event"] == "checkpoint_found")
    assert found["step"] == 20
    assert {s["reason"] for s in found["skipped"]} == {"empty ckpt-30.data-00000-of-00001"}
    assert (ckpt / "ckpt-30.index").exists()  # nothing of the chief's is deleted


def test_a_checkpoint_that_fails_to_restore_is_marked_bad(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    argv, run_dir = start(tmp_path, job_spec(tmp_path, "badrestore", TRAIN_SLOWER,
                                             restart={"max_restarts": 3, "backoff_s": 0.05}))
    with running(argv, run_dir, tmp_path) as job:
        pid = job.wait_event(by("task_started", task="worker:2"))["pid"]
        wait_for_checkpoint(ckpt, 30, job)
        (ckpt / "ckpt-30.data-00000-of-00001").write_text("garbage that is not empty\n")
        os.kill(pid, signal.SIGKILL)
        assert job.wait() == 0, job.stderr
    events = read_events(run_dir)
    found = [e for e in events if e["event"] == "checkpoint_found"]
    assert [f["step"] for f in found[:2]] == [30, 20]
    restore_failure = next(e for e in events if e["event"] == "task_failed" and e["attempt"] == 1)
    assert restore_failure["kind"] == "restore_failed"
    assert found[1]["skipped"][0]["reason"] == "a task failed to restore it"


def test_tasks_starting_from_different_steps_are_named_as_root_cause(tmp_path: Path) -> None:
    argv, run_dir = start(tmp_path, job_spec(
        tmp_path, "mismatch", [*TRAIN, "--ignore-resume-task", "worker:1"],
        restart={"max_restarts": 3, "backoff_s": 0.05}))
    with running(argv, run_dir, tmp_path) as job:
        kill_when_past(job, "worker:2", 25, signal.SIGKILL)
        assert job.wait() != 0
        assert wait_until_gone(job.mark, 5) == []
    events = read_events(run_dir)
    final = events[-1]
    assert final["event"] == "job_failed" and "different steps" in final["reason"]
    assert final["root_cause"]["kind"] == "step_mismatch"
    assert "worker:1 at step 1" in final["root_cause"]["message"]
    assert len([e for e in events if e["event"] == "attempt_started"]) == 2
