"""Pre-flight over SSH: the SSH engine's :class:`~launcher.preflight.runner.ProbeRunner`.

Each remote host is connected to within the connect timeout (reachable, host key trusted, or
recorded with ``--accept-new-host-keys``, authenticated: the CONNECT cell), the probe runs as
``cd WORKDIR && exec PYTHON -c PROBE REQUEST`` on that connection, each word quoted, exactly as the
agent would start, and on the chief's host the checkpoint dir is checked over SFTP: the missing
directories created, a probe file written and removed, and what was created removed again.
``tfcluster doctor`` starts its program on the same connection, the same way, and keeps talking to
it (:mod:`launcher.backends.ssh.program`). The local hosts of a mixed job go through the local
engine's runner: only the transport differs.
"""

from __future__ import annotations

import contextlib
import posixpath
import shlex
import stat
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from launcher.backends.agent_command import agent_workdir, remote_path
from launcher.backends.local.probe import LocalProbeRunner, explain_probe_exit
from launcher.plan.planner import HostPlan
from launcher.preflight.report import HostReport, Layout
from launcher.preflight.runner import ProbeError, ProbeOutput, ProbeProcess, ProbeSession
from launcher.ssh.deadline import Deadline
from launcher.ssh.errors import SshError

if TYPE_CHECKING:  # paramiko is imported only when a spec has remote hosts
    from launcher.ssh.config import SshHost
    from launcher.ssh.connect import SshConnection
    from launcher.ssh.connector import SshConnector


class SshProbeSession:
    """The probe of one remote host, on one connection."""

    def __init__(self, host: HostPlan, connection: SshConnection, deadline: Deadline,
                 timeout_s: float) -> None:
        self.host = host
        self.connection = connection
        self.deadline = deadline
        self.timeout_s = timeout_s
        self.workdir = agent_workdir(host)

    def run(self, argv: Sequence[str]) -> ProbeOutput:
        command = f"cd {shlex.quote(self.workdir)} && exec {shlex.join(argv)}"
        try:
            result = self.connection.run(command, self.deadline)
        except SshError as exc:
            raise ProbeError(exc.summary, exc.detail) from exc
        return ProbeOutput(result.status, result.stdout, result.stderr, self.workdir)

    def start(self, argv: Sequence[str]) -> ProbeProcess:
        from launcher.backends.ssh.program import SshProgram

        try:
            return SshProgram(self.connection, argv, self.workdir, self.timeout_s)
        except SshError as exc:
            raise ProbeError(exc.summary, exc.detail) from exc

    def explain(self, output: ProbeOutput) -> ProbeError:
        return explain_probe_exit(self.host, output)

    def checkpoint_dir_problem(self, path: str) -> str | None:
        path = remote_path(path)
        if not posixpath.isabs(path):
            path = posixpath.normpath(posixpath.join(self.workdir, path))
        return probe_remote_dir(self.connection, path, self.deadline)

    def close(self) -> None:
        self.connection.close()


class SshProbeRunner:
    """Probes remote hosts over SSH and this machine's hosts as the local engine does.
    ``endpoint`` gives a host's connection details (by its name) as the spec declares them."""

    shared_checkpoint_dir = False
    layout: Layout = "table"

    def __init__(self, connector: SshConnector, endpoint: Callable[[str], SshHost]) -> None:
        self.connector = connector
        self.endpoint = endpoint
        self.timeout_s = connector.options.timeout_s
        self.local = LocalProbeRunner(self.timeout_s)

    def describe(self, host: HostPlan) -> str:
        """``local``, or ``user@address`` as ``~/.ssh/config`` resolves it."""
        if host.local:
            return self.local.describe(host)
        with contextlib.suppress(SshError):
            return self.connector.target(self.endpoint(host.name)).describe()
        return host.address

    def open(self, host: HostPlan, report: HostReport) -> ProbeSession:
        if host.local:
            return self.local.open(host, report)
        deadline = Deadline(self.timeout_s)
        try:
            target = self.connector.target(self.endpoint(host.name))
            connection = self.connector.connect(target, deadline)
        except SshError as exc:
            report.connect = "FAILED"
            raise ProbeError(exc.summary, exc.detail) from exc
        key = connection.host_key
        report.connect = "ok" + (" (key recorded)" if key.recorded_in else "")
        if key.recorded_in:
            report.warnings.append(f"new host key {key.key_type} {key.fingerprint} recorded in "
                                   f"{key.recorded_in}")
        return SshProbeSession(host, connection, deadline, self.timeout_s)


def probe_remote_dir(connection: SshConnection, path: str, deadline: Deadline) -> str | None:
    """Over SFTP: create what is missing of ``path``, write and remove a probe file, then remove
    the directories created here. None when all of that worked."""
    created: list[str] = []
    try:
        sftp = connection.transport.open_sftp_client()
    except (OSError, EOFError) as exc:
        return f"SFTP unavailable: {exc}"
    try:
        channel = sftp.get_channel()
        if channel is not None:
            channel.settimeout(max(deadline.left(30.0), 0.1))
        for prefix in _prefixes(path):
            try:
                mode = sftp.stat(prefix).st_mode
            except FileNotFoundError:
                sftp.mkdir(prefix)
                created.append(prefix)
                continue
            if mode is not None and not stat.S_ISDIR(mode):
                return f"{prefix} is not a directory"
        probe = posixpath.join(path, f".tfcluster-preflight-{uuid.uuid4().hex}")
        with sftp.open(probe, "wb") as handle:
            handle.write(b"tfcluster preflight\n")
        sftp.remove(probe)
        return None
    except (OSError, EOFError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return f"{path} is not writable: {reason or type(exc).__name__}"
    finally:
        for directory in reversed(created):
            with contextlib.suppress(OSError, EOFError):
                sftp.rmdir(directory)
        sftp.close()


def _prefixes(path: str) -> list[str]:
    """``a/b/c`` -> ``a``, ``a/b``, ``a/b/c`` (``/`` kept in front of absolute paths)."""
    parts = [p for p in path.split("/") if p and p != "."]
    lead = "/" if path.startswith("/") else ""
    return [lead + "/".join(parts[: i + 1]) for i in range(len(parts))]
