"""`status` and `logs` read back from run directories written by hand: running, finished, or left
by a coordinator that died; `logs -f` driven by a scripted sleep that appends to the log."""

from __future__ import annotations

import fcntl
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.errors import UsageError
from launcher.output.browse import follow_log, log_path
from launcher.output.run_status import status_lines


@pytest.fixture
def live_coordinator(tmp_path: Path) -> Iterator[None]:
    """The run's lock held, as a live coordinator holds it (``logs -f`` follows while it is)."""
    fd = os.open(tmp_path / ".tfcluster-run.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_run(run: Path, events: list[dict[str, Any]], logs: dict[str, str] | None = None) -> None:
    run.mkdir(parents=True, exist_ok=True)
    with (run / "events.jsonl").open("w") as handle:
        for event in events:
            handle.write(json.dumps(event) + "\n")
        handle.write('{"ts": 9')  # a line still being written is skipped
    for name, text in (logs or {}).items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(text)


EVENTS = [
    {"ts": 100.0, "event": "job_started", "job": "demo", "tasks": ["worker:0", "worker:1"]},
    {"ts": 100.0, "event": "attempt_started", "attempt": 0, "resume_step": None},
    {"ts": 101.0, "event": "task_started", "attempt": 0, "task": "worker:0"},
    {"ts": 102.0, "event": "task_progress", "attempt": 0, "task": "worker:0", "step": 40},
    {"ts": 103.0, "event": "task_failed", "attempt": 0, "task": "worker:1", "host": "node-b",
     "kind": "signalled", "signal": "SIGKILL", "exit_code": None, "died_at": 103.0,
     "message": "likely killed for running out of memory (last RSS 390 MiB of a 400 MiB limit)"},
    {"ts": 104.0, "event": "job_restarting", "attempt": 1},
    {"ts": 105.0, "event": "attempt_started", "attempt": 1, "resume_step": 30},
    {"ts": 106.0, "event": "task_started", "attempt": 1, "task": "worker:0"},
    {"ts": 110.0, "event": "job_health", "attempt": 1, "slowest": "worker:1", "steps_per_s": 2.0,
     "stragglers": ["worker:1"],
     "tasks": {"worker:0": {"step": 55, "steps_per_s": 5.0, "cpu_percent": 97.0,
                            "rss_bytes": 300 * 2**20}}},
    {"ts": 111.0, "event": "task_straggling", "attempt": 1, "task": "worker:1", "straggling": True,
     "steps_per_s": 2.0, "others_steps_per_s": 5.0},
]


def test_a_run_whose_coordinator_holds_its_lock_is_running(tmp_path: Path) -> None:
    write_run(tmp_path, EVENTS)
    fd = os.open(tmp_path / ".tfcluster-run.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a live coordinator holds it
        lines = status_lines(tmp_path, now=120.0)
    finally:
        os.close(fd)
    assert lines[0] == "job demo: running, attempt 1 (1 restart(s)), last event 9s ago"
    assert lines[2].startswith("attempt 0: restarted") and "reached step 40" in lines[2]
    assert "root cause: worker:1 on node-b killed by SIGKILL: likely killed for running out" \
        in lines[2]
    assert lines[3].startswith("attempt 1: running") and "from step 30" in lines[3]
    assert "worker:0     running" in lines[5] and "step 55" in lines[5] and "97%" in lines[5]
    assert "slowest task: worker:1" in lines
    assert any(line.startswith("straggler: worker:1 (attempt 1): 2.0 steps/s") for line in lines)


def test_a_run_nobody_holds_lost_its_coordinator(tmp_path: Path) -> None:
    write_run(tmp_path, EVENTS)
    (tmp_path / ".tfcluster-run.lock").write_text("12345\n")
    first = status_lines(tmp_path, now=400.0)[0]
    assert first.startswith("job demo: not running: its coordinator is gone (last event 289s ago")
    assert "it cannot be resumed (spec.json is missing" in first  # as --resume would say
    (tmp_path / "spec.json").write_text(json.dumps({"format": 1, "base_dir": "/", "spec": {}}))
    assert f"continue it with tfcluster run --resume {tmp_path}" in \
        status_lines(tmp_path, now=400.0)[0]


def test_a_finished_run_reads_its_summary(tmp_path: Path) -> None:
    end = {"ts": 130.0, "event": "job_failed", "reason": "restarts exhausted", "exit_code": 137}
    write_run(tmp_path, [*EVENTS, end])
    (tmp_path / "summary.json").write_text(json.dumps({
        "attempts": [{"attempt": 0, "reached_step": 42, "steps_lost": 12, "recovery_s": 3.5}],
        "health": {"slowest": "worker:1", "tasks": {"worker:0": {
            "steps_per_s": 4.5, "cpu_percent_mean": 88.0, "peak_rss_bytes": 310 * 2**20}}},
        "metrics": {"reports": 120, "file": "m.jsonl", "dropped": {"queue_full": 1}}}))
    lines = status_lines(tmp_path)
    assert lines[0] == ("job demo: failed after 2 attempt(s) in 30.0s: restarts exhausted; "
                        "exit code 137")
    assert "reached step 42" in lines[2] and "steps lost 12, recovered in 3.5s" in lines[2]
    assert "4.50 steps/s" in lines[5] and "cpu 88% (mean)" in lines[5]
    assert "peak rss 310 MiB" in lines[5]
    assert "metrics: 120 reports in m.jsonl (1 dropped)" in lines


def test_logs_default_to_the_first_task_of_the_latest_attempt(tmp_path: Path) -> None:
    write_run(tmp_path, EVENTS, {"attempt-0/worker-1.log": "a\n", "attempt-1/worker-0.log": "b\n",
                                 "attempt-1/chief-0.log": "c\n", "attempt-1/notes.log": "x\n"})
    assert log_path(tmp_path, None, None)[1:] == ("chief:0", 1)
    assert log_path(tmp_path, "worker:1", 0)[0] == tmp_path / "attempt-0" / "worker-1.log"
    with pytest.raises(UsageError, match=r"no task worker:1 in attempt 1 .*\(tasks: chief:0, "
                                         r"worker:0\)"):
        log_path(tmp_path, "worker:1", None)


@pytest.mark.usefixtures("live_coordinator")
def test_follow_prints_what_is_added_moves_to_the_next_attempt_and_stops_at_the_end(
        tmp_path: Path) -> None:
    write_run(tmp_path, EVENTS[:3], {"attempt-0/worker-0.log": "one\n"})
    script = [
        lambda: (tmp_path / "attempt-0" / "worker-0.log").open("a").write("two\n"),
        lambda: write_run(tmp_path, EVENTS[:7], {"attempt-1/worker-0.log": "three\n"}),
        lambda: write_run(tmp_path, [*EVENTS, {"ts": 200.0, "event": "job_succeeded"}],
                          {"attempt-1/worker-0.log": "three\nfour\n"}),
    ]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) > len(script):
            raise AssertionError("still following after the job ended")
        script[len(sleeps) - 1]()

    out, err = io.StringIO(), io.StringIO()
    follow_log(tmp_path, "worker:0", None, out, err=err, sleep=sleep)
    assert out.getvalue() == "one\ntwo\nthree\nfour\n"
    assert "attempt 1 started: following" in err.getvalue()


@pytest.mark.usefixtures("live_coordinator")
def test_follow_waits_for_a_task_that_has_not_written_yet(tmp_path: Path) -> None:
    """``logs -f`` right after the job started: worker:0 has printed nothing, so has no log."""
    write_run(tmp_path, EVENTS[:3], {"attempt-0/worker-1.log": "other\n"})
    script = [
        lambda: None,  # still nothing from worker:0
        lambda: write_run(tmp_path, EVENTS[:3], {"attempt-0/worker-0.log": "first\n"}),
        lambda: write_run(tmp_path, [*EVENTS[:3], {"ts": 200.0, "event": "job_succeeded"}]),
    ]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        script[len(sleeps) - 1]()

    out = io.StringIO()
    follow_log(tmp_path, "worker:0", None, out, err=io.StringIO(), sleep=sleep)
    assert out.getvalue() == "first\n"


@pytest.mark.usefixtures("live_coordinator")
def test_follow_of_a_task_the_job_does_not_have_says_so_at_once(tmp_path: Path) -> None:
    write_run(tmp_path, EVENTS[:3], {"attempt-0/worker-0.log": "one\n"})

    def sleep(_seconds: float) -> None:
        raise AssertionError("waited for a task that is not in the job")

    with pytest.raises(UsageError, match=r"no task worker:7 in attempt 0"):
        follow_log(tmp_path, "worker:7", None, io.StringIO(), err=io.StringIO(), sleep=sleep)
