"""Public key authentication as ``ssh`` does it, saying exactly which keys were tried.

Keys are offered in this order, each public key once: the explicit identity files (the spec's
``identity_file``, else the ssh config's ``IdentityFile`` lines), then the ssh-agent's keys (with
``IdentitiesOnly``, only those of the identity files), then, only when no identity file is
configured, the default ``~/.ssh/id_ed25519``, ``id_ecdsa`` and ``id_rsa``. A missing or
passphrase-protected file is skipped and named (there is nobody to ask for a passphrase: load such
a key into ssh-agent). A ``-cert.pub`` next to a key is offered with it. Every attempt is bounded
by the deadline.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import paramiko
from paramiko.pkey import UnknownKeyType

from launcher.ssh import known_hosts
from launcher.ssh.config import SshTarget
from launcher.ssh.deadline import Deadline
from launcher.ssh.errors import AuthenticationError

#: Longest wait for the server to answer one authentication attempt, seconds.
AUTH_TIMEOUT_S = 30.0
#: paramiko treats 0 as "no time-out": the least any time-out is given, seconds.
MIN_TIMEOUT_S = 0.1


@dataclass(frozen=True)
class _Candidate:
    label: str
    key: paramiko.PKey | None  # None: could not be used (``note`` says why)
    note: str = ""


def _load_identity(path: str, explicit: bool) -> _Candidate | None:
    if not os.path.exists(path):
        return _Candidate(path, None, "no such file") if explicit else None
    try:
        return _Candidate(path, paramiko.PKey.from_path(path))
    except (TypeError, paramiko.PasswordRequiredException):
        return _Candidate(path, None, "encrypted with a passphrase: add it to ssh-agent")
    except (OSError, ValueError, paramiko.SSHException, UnknownKeyType) as exc:
        return _Candidate(path, None, f"cannot load: {exc}")


def _public_blob(path: str) -> bytes | None:
    """The key blob of ``path``'s ``.pub`` file, if there is a readable one."""
    try:
        with open(f"{path}.pub", encoding="ascii", errors="replace") as handle:
            fields = handle.read().split()
        return base64.b64decode(fields[1], validate=True) if len(fields) > 1 else None
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _agent_keys(target: SshTarget, files: list[_Candidate],
                notes: list[str]) -> Iterator[list[_Candidate]]:
    """The ssh-agent's keys; with IdentitiesOnly only those of the identity files (a file whose
    private key is encrypted is usable this way when its key is loaded in the agent)."""
    if not os.environ.get("SSH_AUTH_SOCK"):
        notes.append("ssh-agent: not running (SSH_AUTH_SOCK unset)")
        yield []
        return
    try:
        agent = paramiko.Agent()
    except paramiko.SSHException as exc:
        notes.append(f"ssh-agent: {exc}")
        yield []
        return
    try:
        keys = list(agent.get_keys())
        if not keys:
            notes.append("ssh-agent: no keys (or not reachable at SSH_AUTH_SOCK)")
        if target.identities_only:
            allowed = {c.key.asbytes() for c in files if c.key is not None}
            allowed |= {b for b in map(_public_blob, target.identity_files) if b is not None}
            keys = [k for k in keys if k.asbytes() in allowed]
        yield [_Candidate(f"ssh-agent key {k.comment or ''}".rstrip(), k) for k in keys]
    finally:
        agent.close()


def authenticate(transport: paramiko.Transport, target: SshTarget, deadline: Deadline) -> None:
    """Log in as ``target.user`` with the first key the host accepts; raises AuthenticationError
    listing every key tried (or skipped) and why."""
    tried: list[str] = []
    notes: list[str] = []
    seen: set[bytes] = set()
    files = [c for c in (_load_identity(p, True) for p in target.identity_files) if c]
    defaults = [c for c in (_load_identity(p, False) for p in target.default_identities) if c]
    with _agent_keys(target, files, notes) as agent:
        for candidate in [*files, *agent, *defaults]:
            if candidate.key is None:
                tried.append(f"{candidate.label} ({candidate.note})")
                continue
            blob = candidate.key.asbytes()
            if blob in seen:
                continue
            seen.add(blob)
            what = (f"{candidate.label} ({known_hosts.blob_type(blob)} "
                    f"{known_hosts.fingerprint(blob)})")
            transport.auth_timeout = max(deadline.left(AUTH_TIMEOUT_S), MIN_TIMEOUT_S)
            try:
                more = transport.auth_publickey(target.user, candidate.key)
            except paramiko.BadAuthenticationType as exc:
                allowed = ", ".join(exc.allowed_types) or "none"
                raise AuthenticationError(
                    target.name, user=target.user, address=target.address, tried=[*tried, what],
                    detail=f" (the host does not accept public keys; it allows: {allowed})",
                ) from exc
            except paramiko.AuthenticationException:
                tried.append(f"{what} rejected")
                continue
            except (paramiko.SSHException, OSError) as exc:
                tried.append(f"{what}: {exc}")
                break  # the host hung up (e.g. too many authentication failures)
            if more:
                raise AuthenticationError(
                    target.name, user=target.user, address=target.address,
                    tried=[*tried, f"{what} accepted"],
                    detail=f" (the host also wants: {', '.join(more)}, which tfcluster cannot do)")
            if transport.is_authenticated():
                return
        raise AuthenticationError(target.name, user=target.user, address=target.address,
                                  tried=tried, notes=notes)
