"""One agent lives for the whole job: an attempt ends with a terminate the agent confirms once
every task tree is gone, and the next launch reuses the same agent process."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from tests.support.agent_harness import SLEEP_WITH_CHILD, agent, script_task
from worker.wire.protocol import AgentError, Exited, Heartbeat, Launch, Output, Started, Terminate, Terminated

pytestmark = pytest.mark.timeout(60)

SAY_ATTEMPT = "import os\nprint('attempt', os.environ['TFCLUSTER_ATTEMPT'], flush=True)\n"


def launch(tmp_path: Path, attempt: int, code: str = SAY_ATTEMPT) -> Launch:
    task = script_task(tmp_path, "worker:0", code)
    task.env["TFCLUSTER_ATTEMPT"] = str(attempt)
    return Launch(job="t", attempt=attempt, tasks=[task], heartbeat_interval_s=0.2)


def test_three_attempts_run_in_one_agent_each_confirmed_gone(tmp_path: Path) -> None:
    with agent(launch(tmp_path, 0)) as a:
        pids = set()
        for attempt in range(3):
            if attempt:
                a.send(launch(tmp_path, attempt))
            pid = a.next_of(Started, task="worker:0").pid
            pids.add(pid)
            assert a.next_of(Output, task="worker:0").line == f"attempt {attempt}"
            assert a.next_of(Exited, task="worker:0").exit_code == 0
            a.send(Terminate(grace_period_s=1.0))
            a.next_of(Terminated)
            # confirmed gone: the task is no child of the agent any more, alive or zombie
            assert pid not in {p.pid for p in psutil.Process(a.proc.pid).children(recursive=True)}
            a.next_of(Heartbeat)  # alive and well between attempts
        assert len(pids) == 3
        assert a.proc.poll() is None  # the same agent throughout
        a.close_input()
        assert a.proc.wait(10) == 0


def test_a_confirmed_terminate_means_every_process_of_the_attempt_is_gone(
        tmp_path: Path) -> None:
    with agent(launch(tmp_path, 0, SLEEP_WITH_CHILD)) as a:
        a.next_of(Output, task="worker:0")  # "ready": its child runs too
        below = psutil.Process(a.proc.pid).children(recursive=True)
        assert len(below) >= 2
        a.send(Terminate(grace_period_s=1.0))
        a.next_of(Terminated)
        assert [p.pid for p in below if p.is_running() and
                p.status() != psutil.STATUS_ZOMBIE] == []
        a.send(launch(tmp_path, 1))
        assert a.next_of(Output, task="worker:0").line == "attempt 1"


def test_a_launch_while_the_attempt_still_runs_is_refused(tmp_path: Path) -> None:
    with agent(launch(tmp_path, 0, SLEEP_WITH_CHILD)) as a:
        a.next_of(Output, task="worker:0")
        a.send(launch(tmp_path, 1))
        assert "refused" in a.next_of(AgentError).message
        a.send(Terminate(grace_period_s=1.0))
        a.next_of(Terminated)
