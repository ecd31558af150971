"""Real jobs over real SSH (sshd on 127.0.0.1): the same events as a local run, env that reaches
tasks byte for byte and never a shell, and no remote process left when the coordinator dies."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest

from launcher.backends.base import AgentEvent
from launcher.backends.ssh.agent import SshTransport
from launcher.plan.planner import HostPlan, TaskPlan
from launcher.ssh.config import SshHost
from launcher.ssh.errors import RemoteCommandError
from tests.ssh.remote import SSH_HOST, SshSetup, processes_with, ssh_spec, wait_marked_gone
from tests.ssh.sshd import Sshd
from tests.support.jobs import REPO, by, fake_spec, read_events, running, write_spec
from worker.wire.protocol import Launch, TaskLaunch
from worker.wire.tfconfig import TaskId, TFConfig

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(90)]

TASK_EVENTS = ("task_started", "task_progress", "task_exited", "task_failed")


def task_events(events: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    """(event, task) pairs; progress counted once per task (how many is a matter of timing)."""
    pairs = {(e["event"], e["task"]) for e in events if e["event"] == "task_progress"}
    counted = Counter((e["event"], e["task"]) for e in events
                      if e["event"] in TASK_EVENTS and e["event"] != "task_progress")
    counted.update(pairs)
    return counted


def test_a_job_over_ssh_succeeds_with_the_events_of_a_local_run(
        tmp_path: Path, sshd: Sshd, client_key: Path, known_hosts: Path, mark: str) -> None:
    args = ["--steps", "5", "--bind"]
    remote = write_spec(tmp_path, ssh_spec("overssh", sshd, client_key, known_hosts, mark=mark,
                                           args=args))
    local = write_spec(tmp_path, fake_spec("onlocal", args=args, tasks=[
        {"type": "worker", "count": 2}]))
    with running(["run", str(remote)], tmp_path / "ssh-run", tmp_path) as job:
        assert job.wait() == 0, job.stderr
    with running(["run", str(local)], tmp_path / "local-run", tmp_path) as job_local:
        assert job_local.wait() == 0, job_local.stderr
    ssh_events, local_events = job.events(), job_local.events()
    assert ssh_events[0]["event"] == "job_started"
    assert ssh_events[-1]["event"] == "job_succeeded"
    assert {e["event"] for e in ssh_events} == {e["event"] for e in local_events}
    assert task_events(ssh_events) == task_events(local_events)
    assert {e["host"] for e in ssh_events if e["event"] == "task_started"} == {SSH_HOST}
    for task in ("worker-0", "worker-1"):
        assert "done step=5" in (tmp_path / "ssh-run" / "attempt-0" / f"{task}.log").read_text()
    assert "[worker:1] fake_trainer worker:1 done step=5" in job.stdout
    agent_log = (tmp_path / "ssh-run" / "agents" / f"{SSH_HOST}.log").read_text()
    assert sshd.fingerprint in agent_log  # the host key it checked, for the record
    assert sshd.wait_no_sessions(5) == []


def test_env_and_args_reach_the_task_byte_for_byte_and_never_a_shell(
        tmp_path: Path, sshd: Sshd, client_key: Path, known_hosts: Path, mark: str) -> None:
    pwned = Path(f"/tmp/pwned-{uuid.uuid4().hex}")
    value = f"$(touch {pwned}); x'\"`touch {pwned}` \\ $HOME ; echo"
    show = ("import json, os, sys; print('ENV=' + json.dumps(os.environ['INJECT'])); "
            "print('ARGV=' + json.dumps(sys.argv[1:]))")
    spec = ssh_spec("inject", sshd, client_key, known_hosts, mark=mark, workers=1,
                    env={"INJECT": value},
                    entrypoint={"command": [sys.executable, "-c", show, value]})
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        assert job.wait() == 0, job.stderr
    found = dict(re.findall(r"^\[worker:0\]\s+(ENV|ARGV)=(.*)$", job.stdout, re.MULTILINE))
    assert json.loads(found["ENV"]) == value
    assert json.loads(found["ARGV"]) == [value]
    assert not pwned.exists()
    command = (tmp_path / "run" / "agents" / f"{SSH_HOST}.log").read_text().split("\n")[0]
    assert command.endswith("-m worker.agent")  # the one command sshd ran: no env, no TF_CONFIG
    assert "TF_CONFIG" not in command and "INJECT" not in command and value not in command


def test_sigkill_of_the_coordinator_leaves_no_remote_task_within_5s(
        tmp_path: Path, sshd: Sshd, client_key: Path, known_hosts: Path, mark: str) -> None:
    spec = ssh_spec("sigkill", sshd, client_key, known_hosts, mark=mark,
                    args=["--steps", "100000", "--step-time", "0.01", "--spawn-child"])
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        for task in ("worker:0", "worker:1"):
            job.wait_event(by("task_progress", task=task), timeout=30)
        assert len(processes_with(mark)) >= 4  # two tasks, each with a child, on the far end
        job.proc.kill()
        job.proc.wait(10)
        killed_at = time.monotonic()
        assert wait_marked_gone(mark, 5.0) == []
        assert sshd.wait_no_sessions(max(0.0, 5.0 - (time.monotonic() - killed_at))) == []


def test_a_dropped_connection_is_a_lost_host_and_its_tasks_die(
        tmp_path: Path, sshd: Sshd, client_key: Path, known_hosts: Path, mark: str) -> None:
    spec = ssh_spec("dropped", sshd, client_key, known_hosts, mark=mark,
                    args=["--steps", "100000", "--step-time", "0.01"])
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        for task in ("worker:0", "worker:1"):
            job.wait_event(by("task_progress", task=task), timeout=30)
        connections = [p for p in psutil.Process(sshd.proc.pid).children()
                       if p.name() == "sshd"]  # one per client connection
        assert connections
        for proc in connections:
            proc.kill()
        assert job.wait(30) == 1
        assert wait_marked_gone(mark, 5.0) == []
    failed = [e for e in read_events(tmp_path / "run") if e["event"] == "task_failed"]
    assert {e["task"] for e in failed} == {"worker:0", "worker:1"}
    assert all(e["kind"] == "lost_host" and e["host"] == SSH_HOST for e in failed)
    assert any("SSH connection" in e["message"] or "closed" in e["message"] for e in failed), failed


def host_plan(sshd: Sshd, key: Path, known_hosts: Path, *, python: str, workdir: str) -> HostPlan:
    task = TaskPlan(task=TaskId("worker", 0), host=SSH_HOST, port=1, argv=("true",), env={},
                    cwd=workdir, tf_config=TFConfig(cluster={"worker": ("127.0.0.1:1",)},
                                                     task=TaskId("worker", 0)))
    return HostPlan(name=SSH_HOST, local=False, address="127.0.0.1", python=python,
                    tasks=(task,), where=f"ssh 127.0.0.1:{sshd.port}")


def endpoint(sshd: Sshd, key: Path, known_hosts: Path) -> SshHost:
    return SshHost(name=SSH_HOST, address="127.0.0.1", ssh_port=sshd.port,
                   identity_file=str(key), known_hosts=str(known_hosts))


#: An interpreter without tfcluster installed (the venv's base), run outside the checkout.
BARE_PYTHON = str(Path(sys.base_prefix) / "bin" / "python3")


@pytest.mark.parametrize(("python", "workdir", "summary"), [
    ("/nonexistent/python3", str(REPO), "python not found: /nonexistent/python3"),
    (sys.executable, "/nonexistent/workdir", "workdir missing: /nonexistent/workdir"),
    (BARE_PYTHON, "/", "worker not importable"),
])
def test_an_agent_that_cannot_start_is_an_error_that_says_why(
        tmp_path: Path, ssh: SshSetup, python: str, workdir: str, summary: str) -> None:
    sshd = ssh.sshd
    if python == BARE_PYTHON and subprocess.run([python, "-c", "import worker"], cwd="/",
                                                capture_output=True, check=False).returncode == 0:
        pytest.skip(f"{python} can import worker here")
    events: queue.SimpleQueue[AgentEvent] = queue.SimpleQueue()
    backend = SshTransport(lambda _name: endpoint(sshd, ssh.key, ssh.known_hosts))
    launch = Launch(job="j", attempt=0, tasks=[TaskLaunch("worker:0", ["true"], {}, workdir)])
    plan = host_plan(sshd, ssh.key, ssh.known_hosts, python=python, workdir=workdir)
    with pytest.raises(RemoteCommandError) as caught:
        backend.start(plan, launch, events.put, tmp_path / "agent.log")
    assert caught.value.summary == summary
    assert events.empty()  # a host that failed to start reports nothing else
    assert str(caught.value) in (tmp_path / "agent.log").read_text()
    assert sshd.wait_no_sessions(5) == []
