"""The supervision guarantees of tests/integration/test_supervision.py over a real SSH connection:
a remote stranger with an exited task's pid is left alone, and the grandchildren a SIGKILLed remote
agent left are killed by the next agent on that host before it starts the next attempt."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from launcher.plan.planner import remote_process_table
from tests.ssh.remote import SSH_HOST, SshSetup, processes_with
from tests.support import supervision as sv
from tests.support.jobs import by, running, write_spec
from tests.support.tiers import require

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(120)]


def test_a_remote_stranger_with_an_exited_tasks_pid_is_not_signalled(
        tmp_path: Path, ssh: SshSetup) -> None:
    require(os.geteuid() == 0, "forcing pid reuse through ns_last_pid needs root")
    go = tmp_path / "go"
    spec = ssh.spec("sshreuse", entrypoint=sv.entrypoint(tmp_path, "early", sv.EARLY_EXIT, go))
    sv.check_stranger_untouched(tmp_path, spec, go)


def test_the_next_agent_kills_what_a_killed_remote_agent_left(tmp_path: Path,
                                                               ssh: SshSetup) -> None:
    spec = ssh.spec("sshorphans",
                    entrypoint=sv.entrypoint(tmp_path, "gc", sv.GRANDCHILDREN, tmp_path),
                    restart={"max_restarts": 1, "backoff_s": 0.1})
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        sv.wait_files(tmp_path, "grandchild-0-*", 2)
        orphans = sv.grandchild_pids(tmp_path, 0)
        table = remote_process_table(str(tmp_path / "run"), SSH_HOST).replace(
            "~", pwd.getpwuid(os.getuid()).pw_dir, 1)  # the ssh login's home, not this test's
        sv.wait_recorded(Path(table), orphans)
        tasks = [p for p in processes_with(ssh.mark) if "gc.py" in " ".join(p.cmdline())]
        agent, = sv.agent_processes(list({p.parent() for p in tasks} - {None}))
        agent.kill()
        assert job.wait() == 0, job.stderr  # lost host, then attempt 1 succeeds
        assert sv.alive_pids(orphans) == []
        assert job.wait_event(by("task_failed", attempt=0))["kind"] == "lost_host"
