"""The SSH engine: tasks on the hosts the spec names, the remote ones' agents at the far end of
one SSH connection per host (:mod:`launcher.backends.ssh.agent`), this machine's through the
local transport. It differs from the local engine only in that transport, in pre-flight (over
the same connections) and in reaching a remote chief's checkpoints and lock over SFTP.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from launcher.backends.base import Transport
from launcher.backends.engine import EngineOptions
from launcher.backends.local.engine import LocalBackend
from launcher.backends.local.engine import size as local_size
from launcher.chief.access import ChiefFiles, local_fs_only, local_lock_only
from launcher.chief.checkpoints import CheckpointFS
from launcher.chief.lock import LockFile
from launcher.plan.planner import HostPlan, LaunchPlan
from launcher.spec.model import ClusterSpec
from launcher.ssh.config import DEFAULT_PORT, SshHost

if TYPE_CHECKING:
    from launcher.preflight.runner import ProbeRunner


def ssh_host(spec: ClusterSpec, name: str) -> SshHost:
    """How host ``name`` of ``spec`` is reached: its ``hosts`` entry (its name alone if none)."""
    declared = spec.hosts.get(name)
    if declared is None:
        return SshHost(name=name, address=name)
    from launcher.spec.loading import local_path

    return SshHost(name=name, address=spec.address_of(name), user=declared.user,
                   ssh_port=declared.port or DEFAULT_PORT,
                   identity_file=None if declared.identity_file is None
                   else local_path(declared.identity_file, spec),
                   known_hosts=None if declared.known_hosts is None
                   else local_path(declared.known_hosts, spec))


def size(spec: ClusterSpec) -> str:
    return local_size(spec)


def create(spec: ClusterSpec, options: EngineOptions) -> SshBackend:
    return SshBackend(spec, options)


class SshBackend(LocalBackend):
    """The local engine with remote hosts reached over SSH (see the module docstring)."""

    name = "ssh"
    probes_before_run = True

    def __init__(self, spec: ClusterSpec, options: EngineOptions) -> None:
        super().__init__(spec, options)
        from launcher.backends.ssh.agent import SshTransport  # paramiko: only with remote hosts
        from launcher.ssh.connector import SshConnector

        self.connector = SshConnector(accept_new_host_keys=options.accept_new_host_keys,
                                      connect_timeout_s=options.connect_timeout_s)
        self.remote = SshTransport(self.endpoint, self.connector)
        self.chief_files = ChiefFiles(self._chief_fs, self._chief_lock)

    def endpoint(self, name: str) -> SshHost:
        return ssh_host(self.spec, name)

    def transport(self, host: HostPlan) -> Transport:
        return self.local if host.local else self.remote

    def probe_runner(self, launch_plan: LaunchPlan) -> ProbeRunner:
        """Remote hosts over SSH (one connection each, the host key verified), this machine's
        as the local engine runs them (pre-flight and ``tfcluster doctor`` use it)."""
        from launcher.backends.ssh.probe import SshProbeRunner

        return SshProbeRunner(self.connector, self.endpoint)

    def _chief_fs(self, host: HostPlan) -> AbstractContextManager[CheckpointFS | None]:
        from launcher.ssh.sftp import remote_checkpoint_fs

        if host.local:
            return local_fs_only(host)
        return remote_checkpoint_fs(self.connector, self.endpoint(host.name))

    def _chief_lock(self, host: HostPlan,
                    directory: str) -> AbstractContextManager[LockFile | None]:
        from launcher.chief.remote_lock import sftp_lock_file
        from launcher.ssh.sftp import remote_checkpoint_fs

        if host.local:
            return local_lock_only(host, directory)
        return sftp_lock_file(remote_checkpoint_fs(self.connector, self.endpoint(host.name)),
                              directory)
