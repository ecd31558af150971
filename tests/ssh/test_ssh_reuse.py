"""Over SSH, one connection and one remote agent serve every attempt of the job."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_agent_reuse import NOTE_PARENT, assert_one_agent_served_four_attempts
from tests.ssh.remote import SSH_HOST, SshSetup
from tests.support.jobs import running, write_spec

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(120)]


def test_three_restarts_over_one_connection_and_one_remote_agent(tmp_path: Path,
                                                                  ssh: SshSetup) -> None:
    script = tmp_path / "note_parent.py"
    script.write_text(NOTE_PARENT)
    spec = ssh.spec("sshreuse3", entrypoint={"script": str(script), "args": [str(tmp_path)]},
                    restart={"max_restarts": 3, "backoff_s": 0.05})
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        assert job.wait() == 0, job.stderr
        events = job.events()
    assert_one_agent_served_four_attempts(tmp_path, events)
    log = (tmp_path / "run" / "agents" / f"{SSH_HOST}.log").read_text()
    assert log.count("tfcluster: ssh ") == 1  # one connection, opened once
    assert ssh.sshd.wait_no_sessions(5) == []
