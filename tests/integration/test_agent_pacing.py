"""Start-up pacing in the real agent (worker.agent.startup_pacing, worker.agent.task_starts): how many of its
tasks start at once, and what frees a start-up slot, with real processes."""

from __future__ import annotations

import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

from tests.support.agent_harness import AgentUnderTest, M, agent, wait_for
from worker.agent.startup_pacing import HOLD_S, is_busy
from worker.wire.protocol import Launch, Output, Started, TaskLaunch, Terminate, Terminated

pytestmark = pytest.mark.timeout(60)

#: Busy from its first instruction to its end, silent, never asleep: only its hold frees its slot.
SPIN = [sys.executable, "-c", "while True: pass"]
#: Writes a line at once (a shell starts in a millisecond), then spins silently.
SAY_THEN_SPIN = ["/bin/sh", "-c", f"echo up; exec {sys.executable} -c 'while True: pass'"]
SLEEP = ["/bin/sleep", "60"]


def launch(argv: list[str], count: int, concurrency: int | None, tmp_path: Path) -> Launch:
    tasks = [TaskLaunch(task=f"worker:{i}", argv=argv, env={}, cwd=str(tmp_path))
             for i in range(count)]
    return Launch(job="t", attempt=0, tasks=tasks, startup_concurrency=concurrency)


def started_at(messages: list[Started]) -> list[float]:
    return [m.ts for m in sorted(messages, key=lambda m: m.ts)]


def unread_until_the_end(a: AgentUnderTest, kind: type[M]) -> list[M]:
    """Every message of ``kind`` the agent sent and nobody took yet; the agent has ended."""
    found: list[M] = []
    try:
        while True:
            found.append(a.next_of(kind, timeout=20))
    except AssertionError as exc:
        if "agent ended" not in str(exc):
            raise
    return found


def test_is_busy_tells_a_starting_process_from_a_sleeping_or_ended_one() -> None:
    spinner = subprocess.Popen(SPIN)
    sleeper = subprocess.Popen(SLEEP)
    ended = subprocess.Popen(["/bin/true"])
    try:
        assert is_busy(spinner.pid)
        wait_for(lambda: not is_busy(sleeper.pid), 10)  # asleep in nanosleep
        wait_for(lambda: not is_busy(ended.pid), 10)  # a zombie until reaped
        assert is_busy(spinner.pid)
    finally:
        for proc in (spinner, sleeper, ended):
            proc.kill()
            proc.wait()
    assert not is_busy(spinner.pid)  # no such process


def test_with_one_slot_busy_silent_tasks_start_a_hold_apart_in_order(tmp_path: Path) -> None:
    with agent(launch(SPIN, 3, 1, tmp_path)) as a:
        started = [a.next_of(Started, task=f"worker:{i}") for i in range(3)]
        times = [m.ts for m in started]
        assert times == sorted(times)
        # nothing freed a slot before its hold ended (a late agent only makes the gaps longer)
        assert all(later - earlier >= HOLD_S - 0.01 for earlier, later in pairwise(times))


def test_a_task_that_writes_frees_its_slot_at_once(tmp_path: Path) -> None:
    count = 4
    with agent(launch(SAY_THEN_SPIN, count, 1, tmp_path)) as a:
        times = started_at([a.next_of(Started, task=f"worker:{i}") for i in range(count)])
        # never asleep, so only their line can have freed their slots before their holds ended
        assert times[-1] - times[0] < (count - 1) * HOLD_S * 0.8
        assert {a.next_of(Output, task=f"worker:{i}").line for i in range(count)} == {"up"}


def test_tasks_that_sleep_free_their_slots_long_before_their_holds_end(tmp_path: Path) -> None:
    count = 6
    with agent(launch(SLEEP, count, 1, tmp_path)) as a:
        times = started_at([a.next_of(Started, task=f"worker:{i}") for i in range(count)])
        # by their holds alone the last would start (count - 1) * HOLD_S after the first
        assert times[-1] - times[0] < (count - 1) * HOLD_S * 0.8


def test_without_a_limit_every_task_starts_at_once(tmp_path: Path) -> None:
    with agent(launch(SPIN, 3, 0, tmp_path)) as a:
        times = started_at([a.next_of(Started, task=f"worker:{i}") for i in range(3)])
        assert times[-1] - times[0] < HOLD_S


def test_a_terminate_drops_the_tasks_still_waiting_for_a_slot(tmp_path: Path) -> None:
    with agent(launch(SPIN, 3, 1, tmp_path)) as a:
        a.next_of(Started, task="worker:0")
        a.send(Terminate(grace_period_s=1.0))
        a.next_of(Terminated, timeout=20)
        a.close_input()  # the agent ends: every message it sent is then read
        assert a.proc.wait(20) == 0
        later = [m.task for m in unread_until_the_end(a, Started)]
        assert "worker:2" not in later  # it could only have started 2 holds after worker:0
