"""The end of a job that succeeded is calm: what a task prints after the coordination service's
leader exited (TF 2.21's ``BaseCollectiveExecutor::StartAbort UNAVAILABLE: Failed to send RPC to
coordination service ... Connection refused``, seen at the end of real successful runs) stays in
its log; when the job fails, those lines are shown. Lines copied from a real task log."""

from __future__ import annotations

import io
from typing import Any

import pytest

from launcher.output.console import Console

LEADER_GONE = [
    "E0000 00:00:1796494387.982025    9558 base_collective_executor.cc:252] "
    "BaseCollectiveExecutor::StartAbort UNAVAILABLE: Failed to send RPC to coordination service. "
    "Either the leader task was preempted/died/restarted unexpectedly or this task is "
    "experiencing network issues. Check earlier logs from 1) this task, 2) the leader (usually "
    "slice 0 task 0), and 3) cluster scheduler to debug further.",
    "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while "
    "calling /tensorflow.CoordinationService/Heartbeat:",
    ':UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"failed to connect to all '
    "addresses; last error: UNKNOWN: ipv4:127.0.0.1:32211: Failed to connect to remote host: "
    'Connection refused"}',
]


@pytest.fixture(autouse=True)
def _no_colour_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)


def make(**options: Any) -> tuple[Console, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Console(out=out, err=err, colour=False, **options), out, err


def start(console: Console) -> None:
    console.on_event({"event": "attempt_started", "attempt": 0})
    for task in ("worker:0", "worker:1"):
        console.on_event({"event": "task_started", "attempt": 0, "task": task, "log": "x.log"})
    console.task_line("worker:1", "step 300")
    for line in LEADER_GONE:
        console.task_line("worker:1", line)


def test_a_job_that_succeeded_leaves_the_lost_leader_lines_in_the_logs() -> None:
    console, out, err = make()
    start(console)
    console.on_event({"event": "task_exited", "task": "worker:1", "exit_code": 0,
                      "stopped": False})
    console.on_event({"event": "job_succeeded", "job": "local", "attempts": 1})
    console.say("job local succeeded (1 attempt(s))")
    console.close()
    assert out.getvalue() == "[worker:1] step 300\n"
    assert err.getvalue().splitlines() == [
        "tfcluster: 3 line(s) of known TensorFlow noise not shown (they are in the task logs; "
        "--verbose shows them)",
        "tfcluster: job local succeeded (1 attempt(s))"]


def test_a_job_that_failed_shows_them_in_order_before_its_report() -> None:
    console, out, err = make()
    start(console)
    console.on_event({"event": "task_failed", "task": "worker:1", "kind": "exited",
                      "died_at": 5.0, "observed_at": 5.1})
    console.on_event({"event": "job_failed", "job": "local"})
    console.failure_report("Root cause (first observed failure): worker:1 exited with code 1")
    console.close()
    assert out.getvalue().splitlines() == ["[worker:1] step 300",
                                           *(f"[worker:1] {line}" for line in LEADER_GONE)]
    assert "noise" not in err.getvalue()


def test_they_are_shown_when_the_task_goes_on_printing() -> None:
    console, out, _ = make()
    start(console)
    console.task_line("worker:1", "step 301")
    assert out.getvalue().splitlines()[1:] == [*(f"[worker:1] {line}" for line in LEADER_GONE),
                                               "[worker:1] step 301"]
    assert console.noise_lines == 0


def test_verbose_shows_them_as_they_come() -> None:
    console, out, _ = make(verbose=True)
    start(console)
    assert len(out.getvalue().splitlines()) == 1 + len(LEADER_GONE)


def test_a_grpc_detail_line_alone_is_not_held() -> None:
    console, out, _ = make()
    console.task_line("worker:0", LEADER_GONE[1])
    assert out.getvalue() == f"[worker:0] {LEADER_GONE[1]}\n"
