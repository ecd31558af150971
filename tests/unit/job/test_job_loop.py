"""The job loop (coordinator + attempt) driven in memory through a fake backend, in simulated time:
a crash, a hang, a preemption, an agent that fails to start, Ctrl-C during the backoff.

The same behaviours are proven with real processes in tests/integration; these pin the loop's
decisions and the order of what it sends, and run in milliseconds.
"""

from __future__ import annotations

import io
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.backends.base import AgentMessage
from launcher.job.coordinator import Coordinator, JobResult
from launcher.job.inbox import Interrupt
from launcher.job.seams import LoopSeams
from launcher.job.state import JobState
from launcher.output.console import Console
from launcher.plan.ports import PortAllocator
from launcher.run.directory import RunDir
from launcher.run.event_log import read_events
from launcher.run.failures import FailureKind
from launcher.spec.loading import spec_from_dict
from tests.support.fake_backend import (
    FakeBackend,
    FakeWorld,
    SimClock,
    SimInbox,
    TaskScript,
    run_inline,
)
from tests.support.planning import named_planner
from worker.wire.env import PREEMPTION_EXIT_CODE
from worker.wire.protocol import DumpStacks, Launch, TaskReport, Terminate


@dataclass
class Run:
    result: JobResult
    world: FakeWorld
    events: list[dict[str, Any]]
    inbox: SimInbox
    clock: SimClock

    def sent(self, kind: type) -> list[tuple[str, float]]:
        return [(s.host, s.at) for s in self.world.sent if isinstance(s.message, kind)]

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]


def spec(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "sim", "entrypoint": {"command": ["train"]},
        "tasks": [{"type": "chief", "host": "localhost"},
                  {"type": "worker", "host": "localhost", "count": 2}],
    }
    data.update(sections)
    return data


def run(tmp_path: Path, data: dict[str, Any], scripts: Any, *,
        failing_hosts: dict[str, str] | None = None,
        before: Any = None) -> Run:
    clock = SimClock()
    inbox = SimInbox(clock)
    world = FakeWorld(clock=clock, inbox_for=lambda: inbox, scripts=scripts,
                      failing_hosts=failing_hosts or {})
    job_spec = spec_from_dict(data)
    run_dir = RunDir(tmp_path / "run")
    planner = named_planner(job_spec, run_dir=str(run_dir.path), local_python=sys.executable,
                      base_dir=str(tmp_path))
    console = Console(out=io.StringIO(), err=io.StringIO(), colour=False)
    coordinator = Coordinator(planner, run_dir, FakeBackend(world), console, seams=LoopSeams(
        clock=clock, new_inbox=lambda: inbox, spawn=run_inline,
        ports=PortAllocator(lock_dir=str(tmp_path / "ports"))))
    if before is not None:
        before(inbox, clock)
    result = coordinator.run()
    return Run(result, world, read_events(run_dir.events), inbox, clock)


def preemption_notice(task: str, after_s: float) -> Any:
    """For ``run(before=...)``: ``task`` reports its preemption ``after_s`` into the job, as
    worker.checkpointing does on SIGTERM (the notice that keeps an exit 143 outside the budget)."""
    def schedule(inbox: SimInbox, clock: SimClock) -> None:
        when = clock.now + after_s
        inbox.at(when, AgentMessage("localhost", TaskReport(task=task, kind="preempted", ts=when),
                                    when))
    return schedule


def test_a_crash_restarts_the_whole_job_after_the_backoff(tmp_path: Path) -> None:
    def scripts(attempt: int, task: str) -> TaskScript:
        if attempt == 0 and task == "worker:1":
            return TaskScript(steps=5, exit_code=3)
        return TaskScript(steps=10)

    job = run(tmp_path, spec(tmp_path, restart={"max_restarts": 1, "backoff_s": 2.0}), scripts)

    assert job.result.state is JobState.SUCCEEDED
    assert job.result.exit_code == 0
    first, _ = job.result.attempts
    assert first.root_cause is not None
    assert (first.root_cause.task, first.root_cause.exit_code) == ("worker:1", 3)
    assert first.root_cause.kind is FailureKind.EXITED
    restarting, = job.of("job_restarting")
    assert restarting["counts_against_budget"] is True
    assert restarting["backoff_s"] == 2.0
    started = job.of("attempt_started")
    assert [e["attempt"] for e in started] == [0, 1]
    assert started[1]["ts"] - restarting["ts"] >= 2.0  # the backoff was waited out
    # the survivors got TERM with the short failure grace; one agent served both attempts
    terms = [s.message for s in job.world.sent if isinstance(s.message, Terminate)]
    assert terms[0].grace_period_s == 0.5
    assert job.world.agents_closed == job.world.agents_started == 1
    assert [s.message.attempt for s in job.world.sent if isinstance(s.message, Launch)] == [0, 1]


def test_a_hang_is_detected_at_the_deadline_stacks_dumped_before_the_kill(tmp_path: Path) -> None:
    def scripts(attempt: int, task: str) -> TaskScript:
        if task == "worker:0":
            return TaskScript(steps=3, exit_code=None)  # stops reporting after step 3
        return TaskScript(steps=1000)

    job = run(tmp_path, spec(tmp_path, health={"hang_timeout_s": 5.0}, restart={"max_restarts": 0}),
              scripts)

    assert job.result.state is JobState.FAILED
    assert job.result.exit_code == 1
    cause = job.result.attempts[0].root_cause
    assert cause is not None
    assert (cause.task, cause.kind) == ("worker:0", FailureKind.HUNG)
    assert 5.0 <= cause.observed_at - cause.died_at < 5.5
    order = [type(s.message) for s in job.world.sent]
    assert DumpStacks in order and order.index(DumpStacks) < order.index(Terminate)
    # the agents said at once that the dumps are written: the kill follows with no wait
    assert min(at for _, at in job.sent(Terminate)) == max(at for _, at in job.sent(DumpStacks))
    assert job.world.agents_closed == job.world.agents_started


def test_a_preemption_waits_for_the_agreed_save_and_is_not_charged(tmp_path: Path) -> None:
    def scripts(attempt: int, task: str) -> TaskScript:
        if attempt == 0:  # SIGTERM to worker:1: every task saves and exits 143, a step apart
            return TaskScript(steps=5 if task == "worker:1" else 8,
                              exit_code=PREEMPTION_EXIT_CODE)
        return TaskScript(steps=10)

    job = run(tmp_path, spec(tmp_path, restart={"max_restarts": 0}), scripts,
              before=preemption_notice("worker:1", 0.55))

    assert job.result.state is JobState.SUCCEEDED
    first = job.result.attempts[0]
    assert first.root_cause is not None and first.root_cause.kind is FailureKind.PREEMPTED
    restarting, = job.of("job_restarting")
    assert restarting["counts_against_budget"] is False
    # nobody was TERMed: the others finished their save within the grace period
    assert not [e for e in job.of("task_exited") if e.get("signal") == "SIGTERM"]


def test_a_survivor_of_a_preemption_gets_the_full_grace_before_term(tmp_path: Path) -> None:
    def scripts(attempt: int, task: str) -> TaskScript:
        if attempt == 0 and task == "worker:1":
            return TaskScript(steps=5, exit_code=PREEMPTION_EXIT_CODE)
        if attempt == 0:
            return TaskScript(steps=1000)  # never saves by itself
        return TaskScript(steps=2)

    data = spec(tmp_path, restart={"max_restarts": 0}, health={"grace_period_s": 7.0})
    job = run(tmp_path, data, scripts, before=preemption_notice("worker:1", 0.55))

    preempted = next(e for e in job.of("task_failed") if e["kind"] == "preempted")
    first_term = min(at for _, at in job.sent(Terminate))
    assert first_term - preempted["died_at"] >= 7.0
    assert job.result.state is JobState.SUCCEEDED


def test_an_agent_that_cannot_start_fails_its_host_and_the_others_are_closed(
        tmp_path: Path) -> None:
    data = spec(tmp_path, hosts={"node-b": {"address": "198.18.0.9"}}, restart={"max_restarts": 0},
                tasks=[{"type": "chief", "host": "localhost"},
                       {"type": "worker", "host": "node-b", "port": 2222}])
    job = run(tmp_path, data, lambda attempt, task: TaskScript(steps=1000),
              failing_hosts={"node-b": "unreachable: 198.18.0.9:22: connection refused"})

    assert job.result.state is JobState.FAILED
    cause = job.result.attempts[0].root_cause
    assert cause is not None
    assert (cause.task, cause.host, cause.kind) == ("worker:0", "node-b", FailureKind.LOST_HOST)
    assert "connection refused" in (cause.message or "")
    assert job.world.agents_started == job.world.agents_closed == 1  # localhost's, closed


def test_ctrl_c_during_the_backoff_fails_at_once_without_a_new_attempt(tmp_path: Path) -> None:
    def scripts(attempt: int, task: str) -> TaskScript:
        return TaskScript(steps=5, exit_code=3 if task == "worker:1" else None)

    def interrupt_later(inbox: SimInbox, clock: SimClock) -> None:
        inbox.at(clock.now + 10.0, Interrupt(signal.SIGINT))  # the backoff is 30 s

    data = spec(tmp_path, restart={"max_restarts": 3, "backoff_s": 30.0})
    job = run(tmp_path, data, scripts, before=interrupt_later)

    assert job.result.state is JobState.FAILED
    assert job.result.exit_code == 130
    assert "SIGINT" in job.result.reason
    assert [e["attempt"] for e in job.of("attempt_started")] == [0]
    failed, = job.of("job_failed")
    restarting, = job.of("job_restarting")
    assert 9.0 < failed["ts"] - restarting["ts"] < 30.0  # woke for the signal, not the backoff
