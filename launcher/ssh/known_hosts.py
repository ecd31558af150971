"""Host key checking as OpenSSH does it, against OpenSSH ``known_hosts`` files.

:func:`check` is pure: the entries of the known_hosts files, the name the host is filed under
(``host`` on port 22, ``[host]:port`` otherwise) and the key it offered give a :class:`HostKeyStatus`;
:func:`decide` turns that and ``--accept-new-host-keys`` into trust, record, or refuse:

============ ============================== ==========================================
status       without --accept-new-host-keys with --accept-new-host-keys
============ ============================== ==========================================
KNOWN        trust                          trust
UNKNOWN      refuse (how to trust it)       trust and append it to the first file
CHANGED      refuse, always                 refuse, always
REVOKED      refuse, always                 refuse, always
============ ============================== ==========================================

CHANGED also covers a host that offers a key *type* none of its entries has: with paramiko told to
prefer the types on file (see :func:`preferred_key_types`), an honest host offers one of them.
Entries may be plain (``a,b,[c]:2222``), patterns (``*``, ``?``, ``!negation``) or hashed
(``|1|salt|hmac``); ``@revoked`` lines refuse a key; ``@cert-authority`` lines are skipped (host
certificates are not supported).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import enum
import fcntl
import hashlib
import hmac
import os
import re
import struct
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from launcher.ssh.errors import KnownKey

REVOKED_MARKER = "@revoked"
_append_lock = threading.Lock()


class HostKeyStatus(enum.Enum):
    KNOWN = "known"  # a line for this host holds exactly this key
    UNKNOWN = "unknown"  # no line names this host
    CHANGED = "changed"  # lines name this host, none with this key
    REVOKED = "revoked"  # a @revoked line names this key


class Verdict(enum.Enum):
    TRUST = "trust"
    RECORD = "record"  # trust, and append the key to the known_hosts file in use
    REFUSE = "refuse"


def decide(status: HostKeyStatus, accept_new: bool) -> Verdict:
    if status is HostKeyStatus.KNOWN:
        return Verdict.TRUST
    if status is HostKeyStatus.UNKNOWN and accept_new:
        return Verdict.RECORD
    return Verdict.REFUSE


def fingerprint(blob: bytes) -> str:
    """OpenSSH's ``SHA256:<base64, no padding>`` of a public key blob."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def blob_type(blob: bytes) -> str:
    """The key type a public key blob names in its first field (e.g. ``ssh-ed25519``)."""
    if len(blob) < 4:
        return "?"
    (length,) = struct.unpack(">I", blob[:4])
    return blob[4:4 + length].decode("ascii", "replace")


@dataclass(frozen=True)
class Entry:
    """One usable known_hosts line."""

    path: str
    line_no: int
    hosts: str  # the host field as written
    key_type: str
    blob: bytes
    marker: str | None = None  # "@revoked" | "@cert-authority"

    def matches(self, name: str) -> bool:
        return host_field_matches(self.hosts, name)

    def known_key(self) -> KnownKey:
        return KnownKey(self.path, self.line_no, self.key_type, fingerprint(self.blob))


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c)
                              for c in pattern.lower()) + r"\Z", re.DOTALL)


def _hashed_matches(field: str, name: str) -> bool:
    parts = field.split("|")  # "", "1", salt, hash
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt, digest = base64.b64decode(parts[2]), base64.b64decode(parts[3])
    except (binascii.Error, ValueError):
        return False
    mine = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return hmac.compare_digest(mine, digest)


def host_field_matches(hosts: str, name: str) -> bool:
    """OpenSSH's rule for a host field: some pattern matches and no ``!pattern`` does."""
    name = name.lower()
    if hosts.startswith("|"):
        return _hashed_matches(hosts, name)
    matched = False
    for pattern in hosts.split(","):
        negated = pattern.startswith("!")
        if _pattern_regex(pattern[1:] if negated else pattern).match(name):
            if negated:
                return False
            matched = True
    return matched


def parse_line(text: str, path: str, line_no: int) -> Entry | None:
    """One known_hosts line, or None for comments, blanks and lines we cannot use."""
    fields = text.split()
    if not fields or fields[0].startswith("#"):
        return None
    marker = None
    if fields[0].startswith("@"):
        marker, fields = fields[0], fields[1:]
    if len(fields) < 3:
        return None
    try:
        blob = base64.b64decode(fields[2], validate=True)
    except (binascii.Error, ValueError):
        return None
    return Entry(path, line_no, fields[0], fields[1], blob, marker)


def load(paths: Iterable[str]) -> list[Entry]:
    """Every usable line of the files that exist, in order."""
    entries: list[Entry] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except FileNotFoundError:
            continue
        for number, text in enumerate(lines, start=1):
            entry = parse_line(text, path, number)
            if entry is not None:
                entries.append(entry)
    return entries


@dataclass(frozen=True)
class HostKeyCheck:
    status: HostKeyStatus
    #: KNOWN: the matching line; CHANGED: the lines for this host; REVOKED: the @revoked line.
    entries: tuple[Entry, ...] = ()


def check(entries: Sequence[Entry], name: str, blob: bytes) -> HostKeyCheck:
    """How the key ``blob`` offered by the host filed under ``name`` stands against ``entries``."""
    revoked = [e for e in entries if e.marker == REVOKED_MARKER and e.blob == blob
               and e.matches(name)]
    if revoked:
        return HostKeyCheck(HostKeyStatus.REVOKED, (revoked[0],))
    for_host = [e for e in entries if e.marker is None and e.matches(name)]
    same = [e for e in for_host if e.blob == blob]
    if same:
        return HostKeyCheck(HostKeyStatus.KNOWN, (same[0],))
    if for_host:
        offered = blob_type(blob)
        same_type = [e for e in for_host if blob_type(e.blob) == offered]
        return HostKeyCheck(HostKeyStatus.CHANGED, tuple(same_type or for_host))
    return HostKeyCheck(HostKeyStatus.UNKNOWN)


#: known_hosts key types -> the host key algorithms that present them.
_ALGORITHMS = {"ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256")}


def preferred_key_types(entries: Sequence[Entry], name: str,
                        available: Sequence[str]) -> list[str]:
    """``available`` host key algorithms with those of the keys on file for ``name`` first, so a
    host is asked for the key we can check (as OpenSSH orders HostKeyAlgorithms)."""
    known: list[str] = []
    for entry in entries:
        if entry.marker is None and entry.matches(name):
            for algorithm in _ALGORITHMS.get(blob_type(entry.blob), (blob_type(entry.blob),)):
                if algorithm in available and algorithm not in known:
                    known.append(algorithm)
    return known + [a for a in available if a not in known]


def line_for(name: str, blob: bytes) -> str:
    return f"{name} {blob_type(blob)} {base64.b64encode(blob).decode()}\n"


def record(path: str, name: str, blob: bytes) -> None:
    """Append ``name``'s key to ``path`` (created 0600, its directory 0700, like ssh does), under a
    lock so that hosts accepted in parallel by several threads or processes never interleave."""
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    with _append_lock:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with os.fdopen(os.dup(fd), "r+", encoding="utf-8", errors="replace") as handle:
                existing = handle.read()
                if check(load([path]), name, blob).status is HostKeyStatus.KNOWN:
                    return
                prefix = "" if not existing or existing.endswith("\n") else "\n"
                handle.write(prefix + line_for(name, blob))
                handle.flush()
                with contextlib.suppress(OSError):
                    os.fsync(handle.fileno())
        finally:
            os.close(fd)
