"""Trust, as OpenSSH gives it: unknown host keys refused unless --accept-new-host-keys (then
recorded), changed ones always refused, a key the host does not accept named in the error."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.ssh.remote import SSH_HOST, ssh_spec
from tests.ssh.sshd import Sshd, generate_key, openssh_fingerprint
from tests.support.jobs import running, write_spec

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(90)]


def run(tmp_path: Path, spec: dict[str, object], *extra: str) -> tuple[int, str, Path]:
    """``tfcluster run`` to completion: exit code, stdout + stderr, run dir."""
    run_dir = tmp_path / f"run{len(list(tmp_path.glob('run*')))}"
    with running(["run", str(write_spec(tmp_path, spec)), *extra], run_dir, tmp_path) as job:
        code = job.wait()
        return code, job.stdout + job.stderr, run_dir


def test_an_unknown_host_key_is_refused_then_accepted_and_recorded_with_the_flag(
        tmp_path: Path, sshd: Sshd, client_key: Path, mark: str) -> None:
    known_hosts = tmp_path / "empty_known_hosts"
    known_hosts.write_text("")
    spec = ssh_spec("unknownkey", sshd, client_key, known_hosts, mark=mark)

    code, output, run_dir = run(tmp_path, spec)
    assert code != 0
    assert SSH_HOST in output and sshd.known_hosts_name in output
    assert sshd.fingerprint in output and "ssh-ed25519" in output
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {known_hosts}" in output
    assert "--accept-new-host-keys" in output
    assert "Traceback" not in output
    assert known_hosts.read_text() == ""
    assert not (run_dir / "events.jsonl").exists()  # refused before anything started
    assert sshd.wait_no_sessions(5) == []

    code, output, _ = run(tmp_path, spec, "--accept-new-host-keys")
    assert code == 0, output
    found = subprocess.run(["ssh-keygen", "-F", sshd.known_hosts_name, "-f", str(known_hosts)],
                           capture_output=True, text=True, check=False)
    assert found.returncode == 0, "OpenSSH cannot find the recorded key"
    recorded = tmp_path / "recorded.pub"
    recorded.write_text(" ".join(found.stdout.split("\n")[1].split()[1:]) + "\n")
    assert openssh_fingerprint(recorded) == sshd.fingerprint
    assert len(known_hosts.read_text().splitlines()) == 1

    code, output, _ = run(tmp_path, spec)  # known now: no flag needed
    assert code == 0, output
    assert sshd.wait_no_sessions(5) == []


@pytest.mark.parametrize("flag", [(), ("--accept-new-host-keys",)], ids=["plain", "accept-new"])
def test_a_changed_host_key_is_always_refused(tmp_path: Path, sshd: Sshd, client_key: Path,
                                              mark: str, flag: tuple[str, ...]) -> None:
    impostor = generate_key(tmp_path / "other_host_key").with_suffix(".pub")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("# an old key of the host\n" + sshd.known_hosts_line(impostor))
    before = known_hosts.read_text()
    spec = ssh_spec("changedkey", sshd, client_key, known_hosts, mark=mark)

    code, output, _ = run(tmp_path, spec, *flag)
    assert code != 0
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in output
    assert SSH_HOST in output and sshd.known_hosts_name in output
    assert sshd.fingerprint in output  # what it offered
    assert openssh_fingerprint(impostor) in output  # what is on file
    assert f"{known_hosts}:2" in output  # where
    assert "ssh-keygen -R" in output
    assert known_hosts.read_text() == before
    assert sshd.wait_no_sessions(5) == []


def test_a_client_key_the_host_does_not_accept_is_an_auth_error_naming_it(
        tmp_path: Path, sshd: Sshd, known_hosts: Path, mark: str) -> None:
    wrong = generate_key(tmp_path / "wrong_key")
    spec = ssh_spec("wrongkey", sshd, wrong, known_hosts, mark=mark)
    code, output, _ = run(tmp_path, spec)
    assert code != 0
    assert "authentication failed" in output
    assert SSH_HOST in output and f"127.0.0.1:{sshd.port}" in output
    assert str(wrong) in output and "rejected" in output
    assert "Traceback" not in output
    assert sshd.wait_no_sessions(5) == []
