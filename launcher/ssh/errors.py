"""Why an SSH connection to a host was refused or failed, as data that writes its own message.

Every error is an :class:`~launcher.errors.AgentStartError` (so the coordinator treats it as a
host that could not be started) with a one-line ``summary`` for tables (``tfcluster preflight``)
and a full message, with what to do about it, for logs and the terminal.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from launcher.errors import AgentStartError


class SshError(AgentStartError):
    """``host`` could not be reached, trusted, logged into, or set up over SSH."""

    def __init__(self, host: str, summary: str, problem: str, hint: str = "") -> None:
        super().__init__(host, problem, hint)
        self.summary = summary

    @property
    def detail(self) -> str:
        """The full explanation without the host name in front (for per-host listings)."""
        return self.problem + (f" ({self.hint})" if self.hint else "")


class SshConfigError(SshError):
    """The ssh configuration for ``host`` cannot be used (unparsable, unsupported option)."""

    def __init__(self, host: str, problem: str, hint: str = "") -> None:
        super().__init__(host, f"ssh config: {problem}", problem, hint)


class UnreachableError(SshError):
    """No TCP connection to ``address`` (``host:port``): refused, timed out, no route, no DNS."""

    def __init__(self, host: str, address: str, error: str, tries: int = 1) -> None:
        self.address, self.error, self.tries = address, error, tries
        after = f" (after {tries} tries)" if tries > 1 else ""
        super().__init__(
            host, f"unreachable: {address}: {error}",
            f"cannot connect to {address}: {error}{after}",
            f"check hosts.{host}.address / port in the spec and that sshd listens there")


class HandshakeError(SshError):
    """TCP worked but no SSH session could be negotiated (not sshd, no common algorithm...)."""

    def __init__(self, host: str, address: str, error: str) -> None:
        self.address, self.error = address, error
        super().__init__(host, f"SSH handshake failed: {error}",
                         f"SSH handshake with {address} failed: {error}",
                         "is an SSH server listening on that port?")


def keyscan_command(hostname: str, port: int, known_hosts: str) -> str:
    port_option = f"-p {port} " if port != 22 else ""
    return f"ssh-keyscan {port_option}{shlex.quote(hostname)} >> {shlex.quote(known_hosts)}"


class UnknownHostKeyError(SshError):
    """The host offered a key that no known_hosts file lists for it (OpenSSH would ask)."""

    def __init__(self, host: str, *, name: str, key_type: str, fingerprint: str,
                 known_hosts: str, hostname: str, port: int) -> None:
        self.name, self.key_type, self.fingerprint = name, key_type, fingerprint
        self.known_hosts = known_hosts
        super().__init__(
            host, f"unknown host key {key_type} {fingerprint}",
            f"the authenticity of {name} can't be established: its {key_type} key "
            f"fingerprint is {fingerprint} and {known_hosts} has no key for it",
            "check that fingerprint with the host's administrator (on the host: ssh-keygen -lf "
            "/etc/ssh/ssh_host_*_key.pub), then trust it with "
            f"`{keyscan_command(hostname, port, known_hosts)}`, or rerun with "
            "--accept-new-host-keys to record it on first contact")


@dataclass(frozen=True)
class KnownKey:
    """A key that a known_hosts file lists for a host: where, and its fingerprint."""

    path: str
    line_no: int
    key_type: str
    fingerprint: str

    def __str__(self) -> str:
        return f"{self.key_type} {self.fingerprint} ({self.path}:{self.line_no})"


class ChangedHostKeyError(SshError):
    """The host offered a key other than the one on file: always refused, like OpenSSH."""

    def __init__(self, host: str, *, name: str, key_type: str, fingerprint: str,
                 known: Sequence[KnownKey]) -> None:
        self.name, self.key_type, self.fingerprint = name, key_type, fingerprint
        self.known = tuple(known)
        listed = "; ".join(str(k) for k in self.known)
        files = sorted({k.path for k in self.known})
        remove = " ".join(f"ssh-keygen -R {shlex.quote(name)} -f {shlex.quote(f)};"
                          for f in files)
        super().__init__(
            host, f"HOST KEY CHANGED: offered {key_type} {fingerprint}",
            f"WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED for {name}! It offered "
            f"{key_type} {fingerprint} but known_hosts holds {listed}. Someone could be "
            "eavesdropping on you right now (man-in-the-middle attack), or the host key has just "
            "been changed",
            "tfcluster never accepts a changed host key, not even with --accept-new-host-keys; if "
            f"the change is expected, remove the old key ({remove.rstrip(';')}) after checking "
            "the new fingerprint with the host's administrator")


class RevokedHostKeyError(SshError):
    """The host offered a key that a ``@revoked`` known_hosts line names."""

    def __init__(self, host: str, *, name: str, key_type: str, fingerprint: str,
                 revoked: KnownKey) -> None:
        self.name, self.key_type, self.fingerprint = name, key_type, fingerprint
        super().__init__(host, f"REVOKED host key {key_type} {fingerprint}",
                         f"{name} offered {key_type} {fingerprint}, which {revoked.path}:"
                         f"{revoked.line_no} marks @revoked",
                         "this key must not be trusted; ask the host's administrator")


class AuthenticationError(SshError):
    """No key the coordinator has was accepted by the host for ``user``. ``tried`` lists every key
    offered (or skipped) and its fate; ``notes`` say why no more were available (no ssh-agent...)."""

    def __init__(self, host: str, *, user: str, address: str, tried: Sequence[str],
                 notes: Sequence[str] = (), detail: str = "") -> None:
        self.user, self.address = user, address
        self.tried, self.notes = tuple(tried), tuple(notes)
        keys = "; ".join(self.tried) if self.tried else "no key to offer"
        extra = "".join(f"; {note}" for note in self.notes)
        super().__init__(
            host, f"authentication failed for {user} (tried {len(self.tried)} key(s))",
            f"authentication failed for {user}@{address}{detail}; tried: {keys}{extra}",
            f"authorize one of these public keys for {user} on the host (ssh-copy-id), set "
            f"hosts.{host}.identity_file / user in the spec, or load the right key into ssh-agent")


class RemoteCommandError(SshError):
    """Logged in, but the command (the agent, a preflight probe) could not run there."""

    def __init__(self, host: str, summary: str, problem: str, hint: str = "") -> None:
        super().__init__(host, summary, problem, hint)
