"""Real tfcluster runs of the fake trainer: real agents, real processes, real signals."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from pathlib import Path

import pytest

from tests.support.jobs import by, fake_spec, read_events, running, wait_until_gone, write_spec

pytestmark = pytest.mark.timeout(90)


def run_spec(tmp_path: Path, spec: dict[str, object], name: str = "run") -> tuple[Path, Path]:
    return write_spec(tmp_path, spec), tmp_path / name


def test_three_tasks_succeed_and_write_the_run_directory(tmp_path: Path) -> None:
    spec, run_dir = run_spec(tmp_path, fake_spec("ok", args=["--steps", "5", "--bind"]))
    with running(["run", str(spec)], run_dir, tmp_path) as job:
        assert job.wait() == 0, job.stderr
        assert wait_until_gone(job.mark, 5) == []
    events = read_events(run_dir)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "job_started" and kinds[-1] == "job_succeeded"
    assert all("ts" in e for e in events)
    started = {e["task"] for e in events if e["event"] == "task_started"}
    assert started == {"worker:0", "worker:1", "worker:2"}
    assert {e["task"] for e in events if e["event"] == "task_progress"} == started
    assert "task_failed" not in kinds
    for task in ("worker-0", "worker-1", "worker-2"):
        log = (run_dir / "attempt-0" / f"{task}.log").read_text()
        assert "done step=5" in log
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["exit_code"] == 0
    assert summary["attempts"][0]["max_step"] == 5
    assert "[worker:1] fake_trainer worker:1 done step=5" in job.stdout


def test_tasks_form_one_cluster_with_a_tf_config_each(tmp_path: Path) -> None:
    spec, run_dir = run_spec(tmp_path, fake_spec(
        "tfconfig", tasks=[{"type": "chief"}, {"type": "worker", "count": 2},
                           {"type": "evaluator"}],
        entrypoint={"command": ["python3", "-c",
                                "import os; print('TFCONFIG', os.environ['TF_CONFIG'])"]}))
    with running(["run", str(spec)], run_dir, tmp_path) as job:
        assert job.wait() == 0, job.stderr
    configs = {}
    for line in job.stdout.splitlines():
        found = re.match(r"\[(\S+)\]\s+TFCONFIG (.*)", line)
        if found:
            configs[found.group(1)] = json.loads(found.group(2))
    assert set(configs) == {"chief:0", "worker:0", "worker:1", "evaluator:0"}
    clusters = {json.dumps(c["cluster"], sort_keys=True) for c in configs.values()}
    assert len(clusters) == 1
    cluster = configs["chief:0"]["cluster"]
    assert len(cluster["chief"]) == 1 and len(cluster["worker"]) == 2
    assert "evaluator" not in cluster
    assert configs["worker:1"]["task"] == {"type": "worker", "index": 1}


def test_a_task_exiting_3_fails_the_job_with_3_and_is_named_root_cause(tmp_path: Path) -> None:
    spec, run_dir = run_spec(tmp_path, fake_spec("exit3", args=[
        "--steps", "100000", "--step-time", "0.01", "--fail-task", "worker:1",
        "--fail-at-step", "20", "--fail-mode", "exit:3"]))
    with running(["run", str(spec)], run_dir, tmp_path) as job:
        assert job.wait() == 3
        assert wait_until_gone(job.mark, 5) == []
    events = read_events(run_dir)
    failed = [e for e in events if e["event"] == "task_failed"]
    assert [(e["task"], e["exit_code"]) for e in failed] == [("worker:1", 3)]
    stopped = {e["task"]: e for e in events if e["event"] == "task_exited"}
    assert set(stopped) == {"worker:0", "worker:2"}
    assert all(e["stopped"] and e["signal"] == "SIGTERM" for e in stopped.values())
    final = events[-1]
    assert final["event"] == "job_failed" and final["root_cause"]["task"] == "worker:1"
    stderr = job.stderr
    assert "Root cause (first observed failure)" in stderr
    assert "worker:1 on localhost (attempt 0) exited with code 3" in stderr
    assert "failing now (exit:3)" in stderr  # the last lines of its stderr are shown


def test_a_task_killed_by_sigkill_is_reported_as_sigkill(tmp_path: Path) -> None:
    spec, run_dir = run_spec(tmp_path, fake_spec("sigkill", args=[
        "--steps", "100000", "--step-time", "0.01"]))
    with running(["run", str(spec)], run_dir, tmp_path) as job:
        started = job.wait_event(by("task_started", task="worker:2"))
        job.wait_event(by("task_progress", task="worker:2"))
        os.kill(started["pid"], signal.SIGKILL)
        assert job.wait() == 128 + signal.SIGKILL
        assert wait_until_gone(job.mark, 5) == []
    failed = [e for e in read_events(run_dir) if e["event"] == "task_failed"]
    assert [(e["task"], e["signal"], e["exit_code"]) for e in failed] == [
        ("worker:2", "SIGKILL", None)]
    # recorded and bounded; its size is benchmarks/run_all.py's to measure, not a loaded test's
    assert 0 <= failed[0]["detection_latency_ms"] < 10_000
    assert "worker:2 on localhost (attempt 0) was killed by SIGKILL" in job.stderr


def test_an_uncaught_exception_shows_the_traceback_as_root_cause(tmp_path: Path) -> None:
    spec, run_dir = run_spec(tmp_path, fake_spec("raise", args=[
        "--steps", "1000", "--fail-task", "worker:0", "--fail-at-step", "3",
        "--fail-mode", "raise"]))
    with running(["run", str(spec)], run_dir, tmp_path) as job:
        assert job.wait() == 1
    cause = read_events(run_dir)[-1]["root_cause"]
    assert cause["task"] == "worker:0"
    assert "RuntimeError: fake_trainer: simulated crash" in cause["traceback"]
    assert "worker/runtime/bootstrap.py" not in cause["traceback"]  # launcher frames are hidden
    assert "fake_trainer.py" in cause["traceback"]
    assert "RuntimeError: fake_trainer: simulated crash" in job.stderr


def test_a_program_that_cannot_start_is_reported(tmp_path: Path) -> None:
    spec, run_dir = run_spec(tmp_path, fake_spec(
        "nostart", entrypoint={"command": ["/nonexistent/train"]},
        tasks=[{"type": "worker", "count": 2}]))
    with running(["run", str(spec)], run_dir, tmp_path) as job:
        assert job.wait() == 127
    assert "cannot start '/nonexistent/train'" in job.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_tfcluster_stops_every_process_of_the_job(tmp_path: Path,
                                                           sig: signal.Signals) -> None:
    spec, run_dir = run_spec(tmp_path, fake_spec("sigterm", args=[
        "--steps", "100000", "--step-time", "0.01", "--spawn-child", "--spawn-daemon"]))
    with running(["run", str(spec)], run_dir, tmp_path) as job:
        for task in ("worker:0", "worker:1", "worker:2"):
            job.wait_event(by("task_progress", task=task))
        # tfcluster, one agent, three tasks, each with a child and a daemonised grandchild
        assert len(job.processes()) >= 1 + 1 + 3 * 3
        job.proc.send_signal(sig)
        assert job.wait(timeout=20) == 128 + sig
        assert wait_until_gone(job.mark, 1) == []
    final = read_events(run_dir)[-1]
    assert final["event"] == "job_failed" and sig.name in final["reason"]


def test_tasks_that_ignore_sigterm_are_killed_after_the_grace_period(tmp_path: Path) -> None:
    spec, run_dir = run_spec(tmp_path, fake_spec(
        "ignoreterm", args=["--steps", "100000", "--ignore-term", "--fail-task", "worker:0",
                            "--fail-at-step", "30", "--fail-mode", "exit:4"],
        health={"grace_period_s": 1}))
    with running(["run", str(spec)], run_dir, tmp_path) as job:
        assert job.wait(timeout=30) == 4
        assert wait_until_gone(job.mark, 2) == []
    stopped = [e for e in read_events(run_dir) if e["event"] == "task_exited"]
    assert {e["signal"] for e in stopped} == {"SIGKILL"}


def test_sigkill_of_the_coordinator_leaves_no_task_alive(tmp_path: Path) -> None:
    spec, run_dir = run_spec(tmp_path, fake_spec("orphans", args=[
        "--steps", "100000", "--step-time", "0.01", "--spawn-child"]))
    with running(["run", str(spec)], run_dir, tmp_path) as job:
        for task in ("worker:0", "worker:1", "worker:2"):
            job.wait_event(by("task_progress", task=task))
        job.proc.send_signal(signal.SIGKILL)
        job.proc.wait(5)
        # the agent sees EOF on stdin and kills every task tree
        assert wait_until_gone(job.mark, 5) == []


def test_two_clusters_started_at_once_both_succeed(tmp_path: Path) -> None:
    jobs = []
    with contextlib.ExitStack() as stack:
        for name in ("twin-a", "twin-b"):
            spec, run_dir = run_spec(tmp_path, fake_spec(
                name, args=["--steps", "20", "--bind", "--step-time", "0.01"],
                tasks=[{"type": "chief"}, {"type": "worker", "count": 3}]), name)
            jobs.append(stack.enter_context(running(["run", str(spec)], run_dir, tmp_path)))
        codes = [job.wait() for job in jobs]
    assert codes == [0, 0], [job.stderr for job in jobs]
    ports = [set(read_events(job.run_dir)[1]["ports"].values()) for job in jobs]
    assert not ports[0] & ports[1]


def test_grpc_bind_failure_at_start_up_is_retried_on_fresh_ports(tmp_path: Path) -> None:
    spec, run_dir = run_spec(tmp_path, fake_spec("grpc", args=[
        "--steps", "5", "--fail-task", "worker:1", "--fail-at-step", "1",
        "--fail-mode", "grpc-bind", "--fail-attempts", "0"]))
    with running(["run", str(spec)], run_dir, tmp_path) as job:
        assert job.wait() == 0, job.stderr
    events = read_events(run_dir)
    restart = next(e for e in events if e["event"] == "job_restarting")
    assert restart["counts_against_budget"] is False and "fresh ports" in restart["reason"]
    first, second = (e["ports"] for e in events if e["event"] == "attempt_started")
    assert not set(first.values()) & set(second.values())
    assert events[-1]["event"] == "job_succeeded"


def test_local_verb_runs_a_command_on_n_tasks(tmp_path: Path) -> None:
    run_dir = tmp_path / "local"
    code = "import os; print('task', os.environ['TFCLUSTER_TASK'])"
    with running(["local", "-n", "3", "--chief", "--", "python3", "-c", code],
                 run_dir, tmp_path) as job:
        assert job.wait() == 0, job.stderr
    for task in ("chief:0", "worker:0", "worker:1"):
        assert f"task {task}" in job.stdout


def test_sixty_four_tasks_start_and_finish(tmp_path: Path) -> None:
    run_dir = tmp_path / "n64"
    with running(["local", "-n", "64", "--quiet", "--", "python3", "-c", "pass"],
                 run_dir, tmp_path) as job:
        assert job.wait() == 0, job.stderr
        assert wait_until_gone(job.mark, 5) == []
    started = [e for e in read_events(run_dir) if e["event"] == "task_started"]
    assert len(started) == 64


def test_a_second_ctrl_c_kills_at_once_instead_of_waiting_the_grace(tmp_path: Path) -> None:
    spec, run_dir = run_spec(tmp_path, fake_spec(
        "twice", args=["--steps", "100000", "--ignore-term"], health={"grace_period_s": 60}))
    with running(["run", str(spec)], run_dir, tmp_path) as job:
        for task in ("worker:0", "worker:1", "worker:2"):
            job.wait_event(by("task_progress", task=task))
        job.proc.send_signal(signal.SIGINT)
        job.wait_event(by("job_stopping"))
        job.proc.send_signal(signal.SIGINT)
        assert job.wait(timeout=15) == 128 + signal.SIGINT
        assert wait_until_gone(job.mark, 2) == []
    exits = [e for e in read_events(run_dir) if e["event"] == "task_exited"]
    assert {e["signal"] for e in exits} == {"SIGKILL"}
