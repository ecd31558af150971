"""The agent on its own (``python -m worker.agent``), driven over its stdin/stdout like the
coordinator drives it: real processes, real signals."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.agent_harness import (  # noqa: F401 - re-exported for older imports
    SLEEP_WITH_CHILD,
    AgentUnderTest,
    M,
    agent,
    gone,
    script_task,
    wait_for,
)
from worker.wire.protocol import (
    DumpStacks,
    Exited,
    Hello,
    Launch,
    Output,
    Ping,
    SignalTasks,
    StacksDumped,
    Started,
    TaskReport,
    Terminate,
    Terminated,
)
from worker.wire.version import PROTOCOL_VERSION, TFCLUSTER_VERSION

pytestmark = pytest.mark.timeout(60)


def test_eof_on_stdin_kills_every_task_tree_and_ends_the_agent(tmp_path: Path) -> None:
    launch = Launch(job="t", attempt=0, tasks=[script_task(tmp_path, "worker:0", SLEEP_WITH_CHILD)])
    with agent(launch) as a:
        started = a.next_of(Started)
        assert isinstance(started, Started)
        tree = [started.pid] + [c.pid for c in psutil.Process(started.pid).children(recursive=True)]
        a.close_input()
        assert a.proc.wait(10) == 0
        assert gone(tree, 5)


def test_a_silent_coordinator_is_taken_as_gone(tmp_path: Path) -> None:
    launch = Launch(job="t", attempt=0, coordinator_timeout_s=1.0,
                    tasks=[script_task(tmp_path, "worker:0", SLEEP_WITH_CHILD)])
    with agent(launch) as a:
        started = a.next_of(Started)
        assert isinstance(started, Started)
        began = time.monotonic()
        exited = a.next_of(Exited)  # stdin stays open, but nothing more is sent
        assert isinstance(exited, Exited) and exited.signal == "SIGTERM"
        assert time.monotonic() - began < 5
        assert a.proc.wait(10) == 0


def test_the_wait_for_a_late_first_launch_is_not_counted_as_silence(tmp_path: Path) -> None:
    # a coordinator that starts its agents early (or runs on a loaded machine) sends the launch
    # later than the timeout after the agent started: the timeout counts from the launch on
    timeout = 1.0
    with agent() as a:
        a.next_of(Hello)
        time.sleep(timeout * 1.5)  # the scenario, not a synchronisation: the launch comes late
        a.send(Launch(job="t", attempt=0, coordinator_timeout_s=timeout,
                      tasks=[script_task(tmp_path, "worker:0", SLEEP_WITH_CHILD)]))
        a.next_of(Started)
        until = time.monotonic() + timeout * 2
        while time.monotonic() < until:  # pinged as the coordinator pings: the task runs on
            a.send(Ping())
            with pytest.raises(AssertionError, match="no Exited"):
                a.next_of(Exited, timeout=timeout / 4)
        a.close_input()
        assert a.next_of(Exited).signal == "SIGTERM"


def test_signal_command_reaches_only_the_named_task(tmp_path: Path) -> None:
    code = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
    launch = Launch(job="t", attempt=0, tasks=[script_task(tmp_path, "worker:0", code),
                                              script_task(tmp_path, "worker:1", code)])
    with agent(launch) as a:
        a.next_of(Started)
        a.next_of(Started)
        a.send(SignalTasks(signal="SIGUSR2", task="worker:1"))
        exited = a.next_of(Exited)
        assert isinstance(exited, Exited)
        assert (exited.task, exited.signal) == ("worker:1", "SIGUSR2")


def test_dump_stacks_writes_python_stacks_to_the_task_stderr_then_says_so(tmp_path: Path) -> None:
    code = ("import time\ndef waiting_here():\n    print('up', flush=True)\n    time.sleep(600)\n"
            "waiting_here()\n")
    launch = Launch(job="t", attempt=0, tasks=[script_task(tmp_path, "worker:0", code)])
    with agent(launch) as a:
        a.next_of(Started)
        a.next_of(TaskReport)  # "ready": the stack-dump handler is installed
        a.next_of(Output)  # "up": inside waiting_here
        a.send(DumpStacks())
        assert a.next_of(StacksDumped, timeout=10).unfinished == []
        lines = dump_lines(a, "waiting_here")
        assert any("most recent call first" in x for x in lines)


def test_a_dump_held_up_by_the_task_is_awaited_before_it_is_said_written(tmp_path: Path) -> None:
    # the task blocks the dump signal for 0.5 s of its own (a thread inside a section that blocks
    # signals; a loaded machine): the dump is written only then, and "written" comes after it
    code = ("import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
            "print('up', flush=True)\n"
            "while signal.SIGUSR1 not in signal.sigpending():\n    time.sleep(0.01)\n"
            "time.sleep(0.5)\ndef dumping_here():\n"
            "    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})\n"
            "    time.sleep(600)\ndumping_here()\n")
    launch = Launch(job="t", attempt=0, tasks=[script_task(tmp_path, "worker:0", code)])
    with agent(launch) as a:
        a.next_of(Started)
        a.next_of(Output)  # "up": the signal is blocked from here on
        asked = time.monotonic()
        a.send(DumpStacks())
        assert a.next_of(StacksDumped, timeout=10).unfinished == []
        assert time.monotonic() - asked >= 0.5
        assert any("most recent call first" in x for x in dump_lines(a, "dumping_here"))


def dump_lines(a: AgentUnderTest, frame: str) -> list[str]:
    """The task output seen up to the dump's line of ``frame`` (it may follow the answer: the
    agent answers once the dump is done, maybe before it has read all of it)."""
    deadline = time.monotonic() + 10
    lines = outputs(a)
    while not any(frame in line for line in lines):
        a.next_of(Output, timeout=deadline - time.monotonic())
        lines = outputs(a)
    return lines


def outputs(a: AgentUnderTest) -> list[str]:
    return [m.line for _, m in a.seen if isinstance(m, Output)]


def test_terminate_kills_a_task_that_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    code = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('up', flush=True)\ntime.sleep(600)\n")
    launch = Launch(job="t", attempt=0, tasks=[script_task(tmp_path, "worker:0", code)])
    with agent(launch) as a:
        a.next_of(Started)
        a.next_of(Output)  # "up": SIGTERM is ignored from here on
        began = time.monotonic()
        a.send(Terminate(grace_period_s=0.5))
        exited = a.next_of(Exited)
        assert isinstance(exited, Exited) and exited.signal == "SIGKILL"
        assert 0.4 < time.monotonic() - began < 5
        assert isinstance(a.next_of(Terminated), Terminated)


def test_a_bad_launch_message_is_reported_not_a_traceback() -> None:
    line = json.dumps({"type": "launch", "tfcluster_version": TFCLUSTER_VERSION,
                       "protocol_version": PROTOCOL_VERSION}).encode() + b"\n"  # no job, no tasks
    proc = subprocess.run([sys.executable, "-m", "worker.agent"], input=line,
                          capture_output=True, timeout=30, check=False)
    assert proc.returncode == 2
    assert b'"agent_error"' in proc.stdout and b"bad launch message" in proc.stdout
    assert b"Traceback" not in proc.stderr
