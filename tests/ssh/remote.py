"""Specs of jobs whose tasks run over SSH on the test sshd, and finding their remote processes
(by a marker in the spec's env: sshd passes no environment of ours through)."""

from __future__ import annotations

import getpass
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tests.ssh.sshd import Sshd, free_port
from tests.support.jobs import REPO, fake_spec
from tests.support.procs import wait_until_empty, with_env

SSH_HOST = "ssh-local"
SSH_MARK_VAR = "SSH_TEST_MARK"


def ssh_host_entry(sshd: Sshd, key: Path, known_hosts: Path, **extra: Any) -> dict[str, Any]:
    return {"address": "127.0.0.1", "port": sshd.port, "user": getpass.getuser(),
            "identity_file": str(key), "known_hosts": str(known_hosts), **extra}


def ssh_spec(name: str, sshd: Sshd, key: Path, known_hosts: Path, *, mark: str,
             workers: int = 2, **fields: Any) -> dict[str, Any]:
    """A fake-trainer job with ``workers`` tasks on the sshd's host, on explicit free ports, run
    by this venv's python in the repository (so ``worker`` imports there)."""
    tasks = [{"type": "worker", "host": SSH_HOST, "port": free_port()} for _ in range(workers)]
    env = {SSH_MARK_VAR: mark, **fields.pop("env", {})}
    return fake_spec(name, tasks=fields.pop("tasks", tasks), python=sys.executable,
                     workdir=str(REPO), env=env,
                     hosts={SSH_HOST: ssh_host_entry(sshd, key, known_hosts)}, **fields)


def processes_with(mark: str) -> list[psutil.Process]:
    return with_env(SSH_MARK_VAR, mark)


def wait_marked_gone(mark: str, timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` for every process carrying ``mark`` to end; returns the living."""
    return wait_until_empty(lambda: processes_with(mark), timeout)


@dataclass(frozen=True)
class SshSetup:
    """The test sshd with a client key it accepts, a known_hosts that trusts it, the test's mark."""

    sshd: Sshd
    key: Path
    known_hosts: Path
    mark: str

    def spec(self, name: str, **fields: Any) -> dict[str, Any]:
        return ssh_spec(name, self.sshd, self.key, self.known_hosts, mark=self.mark, **fields)
