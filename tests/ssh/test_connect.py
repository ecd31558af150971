"""One SSH connection, in process, against the real test sshd: retries only where they can help,
deadlines that hold, nothing offered to an untrusted host, ProxyJump through a second sshd."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import psutil
import pytest

from launcher.ssh.config import SshHost, resolve_target
from launcher.ssh.connect import ConnectOptions, connect
from launcher.ssh.deadline import Deadline
from launcher.ssh.errors import (
    AuthenticationError,
    HandshakeError,
    UnknownHostKeyError,
    UnreachableError,
)
from tests.ssh.remote import SSH_HOST
from tests.ssh.sshd import (
    HOST,
    Sshd,
    free_port,
    generate_key,
    openssh_fingerprint,
    start_sshd,
)
from tests.support.procs import wait_until_empty

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(60)]


def plan(port: int, key: Path, known_hosts: Path, name: str = SSH_HOST) -> SshHost:
    return SshHost(name=name, address=HOST, user=None, ssh_port=port, identity_file=str(key),
                   known_hosts=str(known_hosts))


def connections_seen(sshd: Sshd) -> int:
    """How many connections sshd has logged, counted once every connection it accepted is over:
    each is logged by a process of its own, which may write late on a loaded machine."""
    server = psutil.Process(sshd.proc.pid)
    left = wait_until_empty(lambda: server.children(recursive=True), timeout=10)
    assert left == [], f"sshd still serves {len(left)} connection(s)"
    return sshd.log.count("Connection from ")


def test_a_refused_connection_is_tried_three_times_with_backoff(client_key: Path,
                                                                tmp_path: Path) -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(UnreachableError) as caught:
        connect(resolve_target(plan(port, client_key, tmp_path / "kh"), paramiko.SSHConfig()),
                ConnectOptions(backoff_s=0.2))
    assert caught.value.tries == 3
    assert time.monotonic() - started >= 0.2 + 0.4  # two pauses between three tries
    assert f"{HOST}:{port}" in str(caught.value) and "Connection refused" in str(caught.value)


def test_retries_never_outlive_the_deadline(client_key: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(UnreachableError) as caught:
        connect(resolve_target(plan(free_port(), client_key, tmp_path / "kh"),
                               paramiko.SSHConfig()),
                ConnectOptions(backoff_s=0.5), Deadline(0.3))
    assert caught.value.tries == 1  # a 0.5s pause would not fit in the 0.3s left: no retry
    # it gave up at the deadline, not after a pause: the slack is for a loaded machine
    assert time.monotonic() - started < 0.3 + 2.0


@pytest.fixture
def silent_port() -> Iterator[int]:
    with socket.socket() as server:
        server.bind((HOST, 0))
        server.listen(4)
        yield int(server.getsockname()[1])


def test_a_server_that_never_speaks_is_a_handshake_error_within_the_timeout(
        client_key: Path, tmp_path: Path, silent_port: int) -> None:
    started = time.monotonic()
    with pytest.raises(HandshakeError, match=r"no answer within 1\.0s"):
        connect(resolve_target(plan(silent_port, client_key, tmp_path / "kh"),
                               paramiko.SSHConfig()), ConnectOptions(timeout_s=1.0))
    assert time.monotonic() - started < 1.0 + 1.0  # slack for a loaded machine


def test_an_untrusted_host_is_offered_no_key_and_a_rejected_key_is_not_retried(
        tmp_path: Path, sshd: Sshd, client_key: Path) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(UnknownHostKeyError):
        connect(resolve_target(plan(sshd.port, client_key, empty), paramiko.SSHConfig()),
                ConnectOptions())
    assert "publickey" not in sshd.log  # refused after key exchange, before authentication

    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line())
    wrong = generate_key(tmp_path / "wrong")
    seen = connections_seen(sshd)
    with pytest.raises(AuthenticationError) as caught:
        connect(resolve_target(plan(sshd.port, wrong, known), paramiko.SSHConfig()),
                ConnectOptions())
    assert connections_seen(sshd) == seen + 1
    assert caught.value.tried == (f"{wrong} (ssh-ed25519 {_fingerprint(wrong)}) rejected",)


def _fingerprint(key: Path) -> str:
    return openssh_fingerprint(key.with_suffix(".pub"))


def test_encrypted_and_missing_identity_files_are_skipped_and_named(
        tmp_path: Path, sshd: Sshd, client_key: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line())
    missing = tmp_path / "no_such_key"
    locked = tmp_path / "locked_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "a passphrase", "-f",
                    str(locked)], check=True, capture_output=True)
    host = SshHost(name=SSH_HOST, address=HOST, ssh_port=sshd.port, known_hosts=str(known))

    def config(*keys: Path) -> paramiko.SSHConfig:
        lines = "".join(f"    IdentityFile {key}\n" for key in keys)
        return paramiko.SSHConfig.from_text(f"Host {SSH_HOST}\n{lines}")

    connection = connect(resolve_target(host, config(missing, locked, client_key)),
                         ConnectOptions())
    try:
        assert connection.transport.is_authenticated()
    finally:
        connection.close()
    with pytest.raises(AuthenticationError) as caught:
        connect(resolve_target(host, config(missing, locked)), ConnectOptions())
    assert caught.value.tried == (f"{missing} (no such file)",
                                  f"{locked} (encrypted with a passphrase: add it to ssh-agent)")


def test_proxyjump_reaches_the_host_through_a_jump_host(tmp_path: Path, sshd: Sshd,
                                                        client_key: Path) -> None:
    jump = start_sshd(tmp_path / "jump-sshd", [client_key])
    try:
        known = tmp_path / "known_hosts"
        known.write_text(sshd.known_hosts_line() + jump.known_hosts_line())
        config = f"Host {SSH_HOST}\n    ProxyJump {HOST}:{jump.port}\n"
        resolved = resolve_target(plan(sshd.port, client_key, known),
                                  paramiko.SSHConfig.from_text(config))
        assert [j.port for j in resolved.jumps] == [jump.port]
        connection = connect(resolved, ConnectOptions())
        try:
            result = connection.run("echo through", Deadline(10))
            # the jump host's sshd is the one connected to the target's port
            tunnels = [c for p in jump.sessions() for c in p.net_connections()
                       if c.raddr and c.raddr.port == sshd.port]
        finally:
            connection.close()
        assert result.stdout == b"through\n"
        assert "Accepted publickey" in jump.log
        assert tunnels
        assert jump.wait_no_sessions(5) == [] and sshd.wait_no_sessions(5) == []
    finally:
        jump.stop()


@pytest.fixture
def ssh_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real ssh-agent for this test, its socket in SSH_AUTH_SOCK; always killed."""
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "ssh-agent did not start"
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.02)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        yield sock
    finally:
        proc.kill()
        proc.wait(10)


def test_keys_in_ssh_agent_are_used_unless_identities_only_excludes_them(
        tmp_path: Path, sshd: Sshd, client_key: Path, ssh_agent: Path) -> None:
    subprocess.run(["ssh-add", "-q", str(client_key)], check=True, capture_output=True)
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line())
    host = SshHost(name=SSH_HOST, address=HOST, ssh_port=sshd.port, known_hosts=str(known))
    connection = connect(resolve_target(host, paramiko.SSHConfig()), ConnectOptions())
    connection.close()  # no identity file anywhere: the agent's key did it

    wrong = generate_key(tmp_path / "wrong")
    only = f"Host {SSH_HOST}\n    IdentityFile {wrong}\n    IdentitiesOnly yes\n"
    with pytest.raises(AuthenticationError) as caught:
        connect(resolve_target(host, paramiko.SSHConfig.from_text(only)), ConnectOptions())
    assert [t.split()[0] for t in caught.value.tried] == [str(wrong)]
