"""The output flood of tests/integration/test_flood.py over a real SSH connection: the remote
agent's exit report never waits behind the flood, and the coordinator's memory stays bounded."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ssh.remote import SshSetup
from tests.support.flood import check, flood_entrypoint, watch
from tests.support.jobs import running, write_spec

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(120)]


def test_a_remote_crash_is_acted_on_within_2s_while_another_task_floods(
        tmp_path: Path, ssh: SshSetup) -> None:
    entrypoint, died = flood_entrypoint(tmp_path)
    spec = ssh.spec("sshflood", entrypoint=entrypoint)
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run",
                 tmp_path) as job:
        highest = watch(job, died)
        check(job, died, highest)
