"""One way to open SSH connections to the hosts of a job, shared by everything that needs one: the
SSH backend (agents), pre-flight (checks) and SFTP (the remote chief's checkpoints).

It resolves a host (the spec's fields over ``~/.ssh/config``, read once) and connects with the same
options (time-out, tries, host-key policy) every time.
"""

from __future__ import annotations

import threading

import paramiko

from launcher.ssh.config import SshHost, SshTarget, load_ssh_config, resolve_target
from launcher.ssh.connect import DEFAULT_TRIES, ConnectOptions, SshConnection, connect
from launcher.ssh.deadline import DEFAULT_CONNECT_TIMEOUT_S, Deadline
from launcher.ssh.errors import SshConfigError


class SshConnector:
    def __init__(self, *, accept_new_host_keys: bool = False,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 tries: int = DEFAULT_TRIES,
                 ssh_config: paramiko.SSHConfig | None = None) -> None:
        self.options = ConnectOptions(timeout_s=connect_timeout_s, tries=tries,
                                      accept_new_host_keys=accept_new_host_keys)
        self._config = ssh_config
        self._config_lock = threading.Lock()

    def target(self, host: SshHost) -> SshTarget:
        """Where ``host`` is reached: the spec's fields over ``~/.ssh/config``."""
        with self._config_lock:
            if self._config is None:
                try:
                    self._config = load_ssh_config()
                except SshConfigError as exc:
                    raise SshConfigError(host.name, exc.problem, exc.hint) from exc
            config = self._config
        return resolve_target(host, config)

    def connect(self, target: SshTarget, deadline: Deadline | None = None) -> SshConnection:
        """An authenticated connection; raises an :class:`~launcher.ssh.errors.SshError`."""
        return connect(target, self.options, deadline)
