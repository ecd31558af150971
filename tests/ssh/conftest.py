"""Fixtures for the SSH tests: a real sshd on 127.0.0.1 (fresh for every test, always killed with
its sessions), a client key it accepts, a known_hosts file that trusts it, an isolated HOME (no
~/.ssh of this machine, no ssh-agent), and a per-test marker that remote tasks carry."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.ssh.remote import SshSetup, processes_with
from tests.ssh.sshd import Sshd, SshdUnavailableError, generate_key, start_sshd
from tests.support.procs import wait_until_empty


@pytest.fixture(scope="session")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_key(tmp_path_factory.mktemp("client") / "id_ed25519")


@pytest.fixture
def sshd(tmp_path: Path, client_key: Path) -> Iterator[Sshd]:
    try:
        server = start_sshd(tmp_path / "sshd", [client_key])
    except SshdUnavailableError as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def known_hosts(tmp_path: Path, sshd: Sshd) -> Path:
    """A known_hosts file that trusts the test sshd's host key (as ``[127.0.0.1]:PORT``)."""
    path = tmp_path / "known_hosts"
    path.write_text(sshd.known_hosts_line())
    return path


def isolate_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make this process and the tfcluster it starts see an empty HOME and no ssh-agent."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    return home


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process and the tfcluster it starts see an empty HOME and no ssh-agent."""
    return isolate_home(tmp_path, monkeypatch)


#: How long after its coordinator is gone a remote task may still live (DESIGN: no orphans).
NO_ORPHANS_S = 5.0


@pytest.fixture
def mark() -> Iterator[str]:
    """The marker of this test's remote tasks; any still alive 5 s after the test (an agent whose
    coordinator went away ends its tasks within that) is killed and fails the test."""
    value = uuid.uuid4().hex
    yield value
    left = wait_until_empty(lambda: processes_with(value), NO_ORPHANS_S)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    assert not left, f"processes left behind: {[p.pid for p in left]}"


@pytest.fixture
def ssh(sshd: Sshd, client_key: Path, known_hosts: Path, mark: str) -> SshSetup:
    return SshSetup(sshd, client_key, known_hosts, mark)
