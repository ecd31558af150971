"""Host key decisions against known_hosts files, checked against OpenSSH's own ssh-keygen."""

from __future__ import annotations

import base64
import stat
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from launcher.ssh import known_hosts
from launcher.ssh.known_hosts import HostKeyStatus, Verdict, check, decide
from tests.ssh.sshd import generate_key, openssh_fingerprint, public_blob, require_sshd

NAME = "[127.0.0.1]:2222"


def blob_of(kind: str = "ed25519") -> bytes:
    """A fresh public key blob of that kind, as it appears base64-encoded in known_hosts."""
    if kind == "ed25519":
        text = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
            Encoding.OpenSSH, PublicFormat.OpenSSH)
    elif kind == "rsa":
        text = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key(
        ).public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH)
    else:
        text = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
            Encoding.OpenSSH, PublicFormat.OpenSSH)
    return base64.b64decode(text.split()[1])


def entries(tmp_path: Path, text: str) -> list[known_hosts.Entry]:
    path = tmp_path / "known_hosts"
    path.write_text(text)
    return known_hosts.load([str(path)])


def line(hosts: str, blob: bytes, marker: str = "") -> str:
    return f"{marker} {known_hosts.line_for(hosts, blob)}".lstrip()


@pytest.mark.parametrize(("status", "accept_new", "verdict"), [
    (HostKeyStatus.KNOWN, False, Verdict.TRUST),
    (HostKeyStatus.KNOWN, True, Verdict.TRUST),
    (HostKeyStatus.UNKNOWN, False, Verdict.REFUSE),
    (HostKeyStatus.UNKNOWN, True, Verdict.RECORD),
    (HostKeyStatus.CHANGED, False, Verdict.REFUSE),
    (HostKeyStatus.CHANGED, True, Verdict.REFUSE),
    (HostKeyStatus.REVOKED, False, Verdict.REFUSE),
    (HostKeyStatus.REVOKED, True, Verdict.REFUSE),
])
def test_decisions(status: HostKeyStatus, accept_new: bool, verdict: Verdict) -> None:
    assert decide(status, accept_new) is verdict


def test_known_unknown_changed(tmp_path: Path) -> None:
    key, other = blob_of(), blob_of()
    found = entries(tmp_path, "# a comment\n\n" + line(NAME, key))
    assert check(found, NAME, key).status is HostKeyStatus.KNOWN
    assert check(found, NAME, other).status is HostKeyStatus.CHANGED
    assert check(found, "[127.0.0.1]:2223", key).status is HostKeyStatus.UNKNOWN
    changed = check(found, NAME, other)
    assert [(e.line_no, e.blob) for e in changed.entries] == [(3, key)]


def test_a_key_of_a_type_not_on_file_counts_as_changed(tmp_path: Path) -> None:
    found = entries(tmp_path, line(NAME, blob_of("rsa")))
    assert check(found, NAME, blob_of("ed25519")).status is HostKeyStatus.CHANGED


def test_any_matching_line_makes_the_key_known(tmp_path: Path) -> None:
    key = blob_of()
    found = entries(tmp_path, line(NAME, blob_of()) + line(NAME, key))
    assert check(found, NAME, key).status is HostKeyStatus.KNOWN


def test_port_22_and_other_ports_are_different_names(tmp_path: Path) -> None:
    key = blob_of()
    plain = entries(tmp_path, line("127.0.0.1", key))
    assert check(plain, "127.0.0.1", key).status is HostKeyStatus.KNOWN
    assert check(plain, NAME, key).status is HostKeyStatus.UNKNOWN
    bracketed = entries(tmp_path, line(NAME, key))
    assert check(bracketed, "127.0.0.1", key).status is HostKeyStatus.UNKNOWN


def test_patterns_lists_and_negation(tmp_path: Path) -> None:
    key = blob_of()
    found = entries(tmp_path, line("Node-A,*.example.com,!bad.example.com", key))
    assert check(found, "node-a", key).status is HostKeyStatus.KNOWN
    assert check(found, "gpu1.example.com", key).status is HostKeyStatus.KNOWN
    assert check(found, "bad.example.com", key).status is HostKeyStatus.UNKNOWN
    assert check(found, "example.com", key).status is HostKeyStatus.UNKNOWN


def test_hashed_entries_written_by_ssh_keygen(tmp_path: Path) -> None:
    require_sshd()
    key = blob_of()
    path = tmp_path / "known_hosts"
    path.write_text(line(NAME, key) + line("node-b", key))
    subprocess.run(["ssh-keygen", "-H", "-f", str(path)], check=True, capture_output=True)
    assert NAME not in path.read_text() and path.read_text().startswith("|1|")
    found = known_hosts.load([str(path)])
    assert check(found, NAME, key).status is HostKeyStatus.KNOWN
    assert check(found, "node-b", key).status is HostKeyStatus.KNOWN
    assert check(found, NAME, blob_of()).status is HostKeyStatus.CHANGED
    assert check(found, "node-c", key).status is HostKeyStatus.UNKNOWN


def test_revoked_keys_are_refused_and_cert_authorities_ignored(tmp_path: Path) -> None:
    key = blob_of()
    found = entries(tmp_path, line("*", key, "@revoked") + line(NAME, key)
                    + line("*", blob_of(), "@cert-authority"))
    assert check(found, NAME, key).status is HostKeyStatus.REVOKED
    assert check(found, "[127.0.0.1]:9", blob_of()).status is HostKeyStatus.UNKNOWN


def test_fingerprint_matches_ssh_keygen(tmp_path: Path) -> None:
    require_sshd()
    key = generate_key(tmp_path / "id")
    _, blob = public_blob(key.with_suffix(".pub"))
    assert known_hosts.fingerprint(blob) == openssh_fingerprint(key.with_suffix(".pub"))


def test_record_appends_a_line_ssh_keygen_finds(tmp_path: Path) -> None:
    require_sshd()
    path = tmp_path / "new" / "known_hosts"
    key = blob_of()
    known_hosts.record(str(path), NAME, key)
    known_hosts.record(str(path), NAME, key)  # already there: not written twice
    assert len(path.read_text().splitlines()) == 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    found = subprocess.run(["ssh-keygen", "-F", NAME, "-f", str(path)], capture_output=True,
                           text=True, check=False)
    assert found.returncode == 0, found.stderr
    assert base64.b64encode(key).decode() in found.stdout


def test_record_keeps_existing_lines_and_adds_a_missing_newline(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    first = line("node-a", blob_of()).rstrip("\n")
    path.write_text(first)
    key = blob_of()
    known_hosts.record(str(path), NAME, key)
    assert path.read_text().splitlines() == [first, known_hosts.line_for(NAME, key).rstrip()]


def test_preferred_key_types_put_the_types_on_file_first(tmp_path: Path) -> None:
    available = ["ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "rsa-sha2-256"]
    found = entries(tmp_path, line(NAME, blob_of("rsa")) + line("other", blob_of("ecdsa")))
    assert known_hosts.preferred_key_types(found, NAME, available) == [
        "rsa-sha2-512", "rsa-sha2-256", "ssh-ed25519", "ecdsa-sha2-nistp256"]
    assert known_hosts.preferred_key_types(found, "unknown", available) == available
