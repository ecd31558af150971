"""A real OpenSSH server on 127.0.0.1 for tests and benchmarks: temp host key, temp authorized
keys, a free port; started with ``sshd -D -e`` and always killed with every session it forked."""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.support.procs import alive, kill_all, wait_until_empty

SSHD = "/usr/sbin/sshd"
HOST = "127.0.0.1"
START_TIMEOUT_S = 10.0


class SshdUnavailableError(RuntimeError):
    pass


def require_sshd() -> None:
    if not os.access(SSHD, os.X_OK) or shutil.which("ssh-keygen") is None:
        raise SshdUnavailableError(
            f"{SSHD} / ssh-keygen not found: install openssh-server (make sshd, or "
            "apt-get install -y openssh-server)")


def free_port() -> int:
    """A port nothing listens on right now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def generate_key(path: Path, comment: str = "tfcluster-test") -> Path:
    """A passphrase-less ed25519 key pair at ``path`` / ``path.pub``."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f",
                    str(path)], check=True, capture_output=True)
    return path


def public_blob(pub_path: Path) -> tuple[str, bytes]:
    key_type, b64 = pub_path.read_text().split()[:2]
    return key_type, base64.b64decode(b64)


def openssh_fingerprint(pub_path: Path) -> str:
    """The fingerprint as ``ssh-keygen -l`` prints it (``SHA256:...``)."""
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub_path)], check=True,
                         capture_output=True, text=True).stdout
    return out.split()[1]


@dataclass
class Sshd:
    port: int
    directory: Path
    host_key: Path
    proc: subprocess.Popen[bytes]

    @property
    def known_hosts_name(self) -> str:
        return f"[{HOST}]:{self.port}"

    def known_hosts_line(self, pub_path: Path | None = None) -> str:
        key_type, blob = public_blob(pub_path or self.host_key.with_suffix(".pub"))
        return f"{self.known_hosts_name} {key_type} {base64.b64encode(blob).decode()}\n"

    @property
    def fingerprint(self) -> str:
        return openssh_fingerprint(self.host_key.with_suffix(".pub"))

    @property
    def log(self) -> str:
        path = self.directory / "sshd.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def sessions(self) -> list[psutil.Process]:
        """Every process sshd forked that is still alive: connections, shells, agents, tasks."""
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []
        return alive(children)

    def wait_no_sessions(self, timeout: float) -> list[psutil.Process]:
        """Wait up to ``timeout`` for every session to end; returns those still alive."""
        return wait_until_empty(self.sessions, timeout)

    def stop(self) -> None:
        """Kill sshd and every process it forked (safe to call more than once)."""
        leftovers = self.sessions()
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        kill_all(leftovers, timeout=5)
        self.proc.wait(10)


SSHD_CONFIG = """\
Port {port}
ListenAddress {host}
HostKey {host_key}
PidFile {directory}/sshd.pid
AuthorizedKeysFile {directory}/authorized_keys
StrictModes no
PermitRootLogin yes
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AllowTcpForwarding yes
MaxStartups 200
MaxSessions 50
LogLevel VERBOSE
Subsystem sftp internal-sftp
"""


def start_sshd(directory: Path, authorized: Sequence[Path], host_key: Path | None = None,
               port: int | None = None) -> Sshd:
    """sshd on 127.0.0.1 accepting the public keys of ``authorized`` (private key paths),
    returned once its port accepts connections."""
    require_sshd()
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    directory.mkdir(parents=True, exist_ok=True)
    host_key = host_key or generate_key(directory / "ssh_host_ed25519_key", "test-host")
    (directory / "authorized_keys").write_text(
        "".join(Path(f"{key}.pub").read_text() for key in authorized))
    port = port or free_port()
    config = directory / "sshd_config"
    config.write_text(SSHD_CONFIG.format(port=port, host=HOST, host_key=host_key,
                                         directory=directory))
    with (directory / "sshd.log").open("wb") as log:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True)
    server = Sshd(port, directory, host_key, proc)
    try:
        _wait_listening(server)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_listening(server: Sshd) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if server.proc.poll() is not None:
            raise RuntimeError(f"sshd exited {server.proc.returncode}:\n{server.log}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, server.port), 0.5):
            return
        if time.monotonic() >= deadline:
            raise RuntimeError(f"sshd did not listen on {server.port} within "
                               f"{START_TIMEOUT_S}s:\n{server.log}")
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(0.02)  # wakes at once if sshd dies


@contextlib.contextmanager
def running_sshd(directory: Path, authorized: Sequence[Path],
                 host_key: Path | None = None) -> Iterator[Sshd]:
    server = start_sshd(directory, authorized, host_key)
    try:
        yield server
    finally:
        server.stop()
