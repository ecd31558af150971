"""A host whose tfcluster is another version than the coordinator's, reached over a real sshd (a
copy of this ``worker`` package announcing another version): its agent is refused at its hello,
with one line naming the host, both versions and the fix, before any launch is sent; nothing
starts there and nothing is left running."""

from __future__ import annotations

import queue
import sys
from pathlib import Path

import pytest

from launcher.backends.base import AgentEvent
from launcher.backends.ssh.agent import SshTransport
from launcher.backends.version_check import VersionMismatch
from tests.ssh.remote import SSH_HOST, SshSetup
from tests.ssh.test_ssh_run import endpoint, host_plan
from tests.support.jobs import running, write_spec
from tests.support.other_version import OTHER_VERSION, copy_of_worker
from worker.wire.protocol import Launch, TaskLaunch
from worker.wire.version import PROTOCOL_VERSION, TFCLUSTER_VERSION

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(90)]

ONE_LINE = (f"{SSH_HOST}: tfcluster {OTHER_VERSION} (protocol {PROTOCOL_VERSION}) there, but the "
            f"coordinator runs tfcluster {TFCLUSTER_VERSION} (protocol {PROTOCOL_VERSION}) "
            f"(install tfcluster {TFCLUSTER_VERSION} on {SSH_HOST}, or point the spec's 'python' "
            "at an interpreter that has it)")


def test_an_agent_of_another_version_is_refused_at_its_hello(tmp_path: Path,
                                                              ssh: SshSetup) -> None:
    other = copy_of_worker(tmp_path / "other")  # the workdir: its worker is imported there
    marker = tmp_path / "started"
    events: queue.SimpleQueue[AgentEvent] = queue.SimpleQueue()
    backend = SshTransport(lambda _name: endpoint(ssh.sshd, ssh.key, ssh.known_hosts))
    launch = Launch(job="j", attempt=0, tasks=[
        TaskLaunch("worker:0", ["touch", str(marker)], {}, str(other))])
    plan = host_plan(ssh.sshd, ssh.key, ssh.known_hosts, python=sys.executable,
                     workdir=str(other))
    with pytest.raises(VersionMismatch) as caught:
        backend.start(plan, launch, events.put, tmp_path / "agent.log")
    assert str(caught.value) == ONE_LINE
    assert events.empty()  # a host refused reports nothing else
    assert ONE_LINE in (tmp_path / "agent.log").read_text()
    assert ssh.sshd.wait_no_sessions(5) == []
    assert not marker.exists()


def test_a_run_on_a_host_of_another_version_stops_with_one_line_before_any_task(
        tmp_path: Path, ssh: SshSetup) -> None:
    """Pre-flight passes (the host's tfcluster changes before its agent starts, as it were): the
    agent's hello is what refuses it."""
    other = copy_of_worker(tmp_path / "other")
    python = tmp_path / "python-agent-other"  # the agent imports the other version, nothing else
    python.write_text(f'#!/bin/sh\ncase "$*" in *worker.agent*) export PYTHONPATH={other};; esac\n'
                      f'exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    marker = tmp_path / "started"
    fields = ssh.spec("versions", entrypoint={"command": ["touch", str(marker)]},
                      restart={"max_restarts": 3, "backoff_s": 0.1})
    spec = write_spec(tmp_path, {**fields, "python": str(python), "workdir": str(tmp_path)})
    with running(["run", str(spec)], tmp_path / "run", tmp_path) as job:
        assert job.wait() == 1, job.stderr
        assert [line for line in job.stderr.splitlines() if OTHER_VERSION in line] == \
            [f"tfcluster: {ONE_LINE}"], job.stderr
        assert "Traceback" not in job.stderr
        assert not [line for line in job.stdout.splitlines() if line.startswith("[worker:")]
    assert not marker.exists()
    assert ssh.sshd.wait_no_sessions(5) == []  # and the mark fixture: no process left
