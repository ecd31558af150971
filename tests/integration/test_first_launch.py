"""The first attempt launched before the job machinery is imported (launcher.job.first_launch):
what it holds, and how the local backend takes its early agent over, with a real agent and real
tasks."""

from __future__ import annotations

import dataclasses
import queue
import re
import signal
import sys
from pathlib import Path

import pytest

from launcher.backends.base import AgentClosed, AgentEvent, AgentMessage
from launcher.backends.early_agent import EarlyAgent
from launcher.backends.local import LocalBackend
from launcher.cli.start import planner_for
from launcher.errors import AgentStartError
from launcher.job.checkpoint_lock import CheckpointDirInUse
from launcher.job.first_launch import FirstLaunch, launch_first
from launcher.job.stored_spec import stored_spec
from launcher.output.rundir import RunDir
from launcher.spec.loading import spec_from_dict
from launcher.spec.model import ClusterSpec
from tests.integration.test_agent import wait_for
from tests.jobs import Job, wait_until_gone
from tests.procs import alive, by_pid, wait_until_empty
from worker.protocol import AgentError, Exited, Message, Started

pytestmark = pytest.mark.timeout(60)

SAY = "import os; print(os.environ['TFCLUSTER_TASK'], flush=True)"


def spec(tmp_path: Path, code: str = SAY, **fields: object) -> ClusterSpec:
    return spec_from_dict({"name": "first", "entrypoint": {"command": [sys.executable, "-c", code]},
                           "tasks": [{"type": "worker", "count": 2}], **fields}, source="test")


def start(tmp_path: Path, cluster: ClusterSpec, early: EarlyAgent,
          name: str = "run") -> FirstLaunch | None:
    run_dir = RunDir(tmp_path / name, stored_spec=stored_spec(cluster, str(tmp_path)))
    return launch_first(planner_for(cluster, str(run_dir.path)), run_dir, early)


class Inbox:
    def __init__(self) -> None:
        self.items: queue.Queue[AgentEvent] = queue.Queue()

    def __call__(self, event: AgentEvent) -> None:
        self.items.put(event)

    def until_closed(self) -> list[AgentMessage]:
        got: list[AgentMessage] = []
        while True:
            event = self.items.get(timeout=30)
            if isinstance(event, AgentClosed):
                return got
            got.append(event)


def test_the_agent_started_early_runs_the_first_launch_once(tmp_path: Path) -> None:
    cluster = spec(tmp_path)
    early = EarlyAgent(sys.executable)
    try:
        first = start(tmp_path, cluster, early)
        assert first is not None and early.sent is not None
        assert first.run_dir.events.exists()  # the run directory exists before the coordinator
        plan = first.planner.plan(0, first.ports)  # the coordinator's own plan: the same launch
        host = plan.hosts[0]
        inbox = Inbox()
        handle = LocalBackend(python=sys.executable, early=early).start(
            host, plan.launch_message(host), inbox, tmp_path / "agent.log")
        messages: list[Message] = []
        while sum(isinstance(m, Exited) for m in messages) < 2:
            event = inbox.items.get(timeout=30)
            assert isinstance(event, AgentMessage)
            messages.append(event.message)
        handle.close(10.0)
        messages += [e.message for e in inbox.until_closed()]
    finally:
        early.discard()
    started = sorted(m.task for m in messages if isinstance(m, Started))
    assert started == ["worker:0", "worker:1"]  # once each: the launch was not sent again
    assert [m for m in messages if isinstance(m, AgentError)] == []
    assert all(m.exit_code == 0 for m in messages if isinstance(m, Exited))
    first.held.close()
    first.allocator.close()


def test_an_early_agent_sent_another_launch_is_not_taken(tmp_path: Path) -> None:
    marks = tmp_path / "pids"
    marks.mkdir()
    cluster = spec(tmp_path, code=(f"import os, time; open(os.path.join({str(marks)!r}, "
                                   "os.environ['TFCLUSTER_TASK']), 'w').write(str(os.getpid())); "
                                   "time.sleep(600)"))
    early = EarlyAgent(sys.executable)
    try:
        first = start(tmp_path, cluster, early)
        assert first is not None and early.sent is not None
        wait_for(lambda: len([p for p in marks.iterdir() if p.read_text()]) == 2, 30)
        tasks = by_pid(int(p.read_text()) for p in marks.iterdir())
        plan = first.planner.plan(0, first.ports)
        host = plan.hosts[0]
        other = dataclasses.replace(plan.launch_message(host), attempt=7)
        with pytest.raises(AgentStartError, match="sent another launch"):
            LocalBackend(python=sys.executable, early=early).start(
                host, other, Inbox(), tmp_path / "agent.log")
        assert not wait_until_empty(lambda: alive(tasks), 10)  # its agent ended, and they did
        first.held.close()
        first.allocator.close()
    finally:
        early.discard()


def test_a_checkpoint_dir_another_run_holds_starts_nothing(tmp_path: Path) -> None:
    cluster = spec(tmp_path, code="import time; time.sleep(600)",
                   checkpoint={"dir": str(tmp_path / "ckpt")})
    holder, second = EarlyAgent(sys.executable), EarlyAgent(sys.executable)
    try:
        first = start(tmp_path, cluster, holder, "one")
        assert first is not None
        with pytest.raises(CheckpointDirInUse):
            start(tmp_path, cluster, second, "two")
        assert second.sent is None  # nothing was launched
        assert not (tmp_path / "two").exists()  # nor created
        first.held.close()
        first.allocator.close()
    finally:
        holder.discard()
        second.discard()


def test_what_cannot_launch_first_is_left_to_the_coordinator(tmp_path: Path) -> None:
    remote = spec_from_dict({"name": "far", "entrypoint": {"command": ["true"]},
                             "hosts": {"node-a": {"address": "198.18.0.2"}},
                             "tasks": [{"type": "worker", "host": "node-a", "port": 2222}]},
                            source="test")
    two_agents = spec_from_dict({"name": "two", "entrypoint": {"command": ["true"]},
                                 "tasks": [{"type": "worker", "host": "localhost"},
                                           {"type": "worker", "host": "127.0.0.1"}]},
                                source="test")  # both this machine, but an agent each
    early = EarlyAgent(sys.executable)
    try:
        assert start(tmp_path, remote, early) is None
        assert start(tmp_path, two_agents, early) is None
        assert early.sent is None
        cluster = spec(tmp_path)
        first = start(tmp_path, cluster, early)
        assert first is not None
        assert start(tmp_path, cluster, early, "again") is None  # it has its launch already
        first.held.close()
        first.allocator.close()
    finally:
        early.discard()


def test_a_ctrl_c_as_the_first_tasks_start_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    job = Job(["local", "-n", "2", "--", sys.executable, "-c", "import time; time.sleep(60)"],
              run_dir, tmp_path)
    try:
        wait_for((run_dir / "events.jsonl").exists, 30)  # the first launch is out
        job.proc.send_signal(signal.SIGINT)  # before or after tfcluster's own handler is in
        # a shell sees 130 either way: Python itself ends by SIGINT (-2 here) when the interrupt
        # went through code it ran from a string on its way (a dataclass being created)
        assert job.wait(30) in (130, -signal.SIGINT)
        assert "Traceback" not in job.stderr
        assert re.fullmatch(r"tfcluster: (interrupted|job local failed: tfcluster was stopped "
                            r"by SIGINT; exit code 130; run dir .*)",
                            job.stderr.strip().splitlines()[-1]), job.stderr
        assert wait_until_gone(job.mark, 10) == []
    finally:
        job.kill_all()

