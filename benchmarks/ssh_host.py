"""A throwaway SSH host for the benchmarks: a real sshd on 127.0.0.1 (``tests/ssh/sshd.py``) with its
own host key, a client key it accepts and a known_hosts file that trusts it, all in a temporary
directory, and an empty HOME for the tfcluster that connects to it (no ``~/.ssh`` of this machine is
read or written, no ssh-agent is used). The server is killed, with every session it forked, on the
way out."""

from __future__ import annotations

import contextlib
import getpass
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import REPO, BenchmarkError, scratch

from tests.ssh.sshd import Sshd, SshdUnavailableError, free_port, generate_key, start_sshd
from tests.support.procs import kill_all

__all__ = ["SSH_HOST", "SshHost", "SshdUnavailableError", "throwaway_sshd"]

SSH_HOST = "bench-ssh"
SESSION_WAIT_S = 5.0


@dataclass(frozen=True)
class SshHost:
    sshd: Sshd
    key: Path
    known_hosts: Path
    home: Path  # HOME for the CLI

    def host_entry(self) -> dict[str, Any]:
        return {"address": "127.0.0.1", "port": self.sshd.port, "user": getpass.getuser(),
                "identity_file": str(self.key), "known_hosts": str(self.known_hosts)}

    def spec_overrides(self, workers: int) -> dict[str, Any]:
        """What turns a local spec into one whose ``workers`` tasks run over SSH on this host (on
        explicit free ports, with this python, in this checkout)."""
        return {"hosts": {SSH_HOST: self.host_entry()}, "python": sys.executable,
                "workdir": str(REPO),
                "tasks": [{"type": "worker", "host": SSH_HOST, "port": free_port()}
                          for _ in range(workers)]}

    def cli_env(self) -> dict[str, str | None]:
        return {"HOME": str(self.home), "SSH_AUTH_SOCK": None}

    def check_no_sessions(self) -> None:
        """BenchmarkError if an sshd session (connection, shell, agent, task) outlives a run."""
        left = self.sshd.wait_no_sessions(SESSION_WAIT_S)
        if left:
            pids = kill_all(left)
            raise BenchmarkError(f"{len(pids)} sshd session process(es) still running "
                                 f"{SESSION_WAIT_S:.0f}s after tfcluster exited (killed): {pids}")


@contextlib.contextmanager
def throwaway_sshd(parent: Path) -> Iterator[SshHost]:
    """Raises SshdUnavailableError when there is no sshd to start."""
    with scratch(parent, "sshd-") as directory:
        key = generate_key(directory / "client_key", "tfcluster-bench")
        server = start_sshd(directory / "sshd", [key])
        try:
            known_hosts = directory / "known_hosts"
            known_hosts.write_text(server.known_hosts_line(), encoding="utf-8")
            home = directory / "home"
            home.mkdir()
            yield SshHost(server, key, known_hosts, home)
        finally:
            server.stop()
