"""The first attempt of a local run, reserved (launcher.job.reservation) and launched before the job
machinery is imported (launcher.cli.start): what it holds, and how the local transport takes its
early agent over, with a real agent and real tasks."""

from __future__ import annotations

import argparse
import dataclasses
import queue
import re
import signal
import sys
from pathlib import Path

import pytest

from launcher.backends.base import AgentClosed, AgentEvent, AgentMessage
from launcher.backends.early_agent import EarlyAgent
from launcher.backends.local.transport import LocalTransport
from launcher.chief.lock import CheckpointDirInUse
from launcher.cli.start import FirstLaunch, launch_first
from launcher.errors import AgentStartError
from launcher.spec.loading import spec_from_dict
from launcher.spec.model import ClusterSpec
from tests.support.agent_harness import wait_for
from tests.support.jobs import Job, wait_until_gone
from tests.support.procs import alive, by_pid, wait_until_empty
from worker.wire.protocol import AgentError, Exited, Message, Started

pytestmark = pytest.mark.timeout(60)

SAY = "import os; print(os.environ['TFCLUSTER_TASK'], flush=True)"


def spec(tmp_path: Path, code: str = SAY, **fields: object) -> ClusterSpec:
    return spec_from_dict({"name": "first", "entrypoint": {"command": [sys.executable, "-c", code]},
                           "tasks": [{"type": "worker", "count": 2}], **fields}, source="test")


def start(tmp_path: Path, cluster: ClusterSpec, early: EarlyAgent,
          name: str = "run") -> FirstLaunch | None:
    return launch_first(cluster, argparse.Namespace(run_dir=str(tmp_path / name)), early)


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
        # the run directory exists before the coordinator
        assert first.reservation.run_dir.events.exists()
        plan = first.planner.plan(0, first.reservation.ports)  # the coordinator's: the same launch
        host = plan.hosts[0]
        inbox = Inbox()
        handle = LocalTransport(python=sys.executable, early=early).start(
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
    first.reservation.release()


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
        plan = first.planner.plan(0, first.reservation.ports)
        host = plan.hosts[0]
        other = dataclasses.replace(plan.launch_message(host), attempt=7)
        with pytest.raises(AgentStartError, match="sent another launch"):
            LocalTransport(python=sys.executable, early=early).start(
                host, other, Inbox(), tmp_path / "agent.log")
        assert not wait_until_empty(lambda: alive(tasks), 10)  # its agent ended, and they did
        first.reservation.release()
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
        first.reservation.release()
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
        assert start(tmp_path, remote, early) is None  # another engine: the coordinator's
        both_here = start(tmp_path, two_agents, early, "two")
        assert both_here is not None  # reserved, but not launched: it needs two agents
        both_here.reservation.release()
        assert early.sent is None
        cluster = spec(tmp_path)
        first = start(tmp_path, cluster, early)
        assert first is not None
        sent = early.sent
        again = start(tmp_path, cluster, early, "again")
        assert again is not None and early.sent is sent  # it has its launch already
        again.reservation.release()
        first.reservation.release()
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

