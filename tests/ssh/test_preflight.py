"""``tfcluster preflight``: every host checked at once, one table, within the connect timeout."""

from __future__ import annotations

import importlib.metadata
import platform
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ssh.remote import SSH_HOST, SshSetup, ssh_host_entry, ssh_spec
from tests.ssh.sshd import HOST, Sshd, free_port, generate_key
from tests.support.jobs import REPO, write_spec
from worker.wire.module_start import MARKER
from worker.wire.version import TFCLUSTER_VERSION

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(60)]

CONNECT_TIMEOUT_S = 3.0
#: preflight's own bound is the connect timeout plus half a second; allow a little more.
MARGIN_S = 1.0
#: The whole process (Python start-up, imports, exit) on a loaded CI machine: a hang guard.
PROCESS_MARGIN_S = 8.0


def preflight(spec: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "launcher", "preflight", str(spec), *extra],
                            capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    return result, time.monotonic() - started


def row(output: str, host: str) -> str:
    rows = [line for line in output.splitlines() if line.split()[:1] == [host]]
    assert len(rows) == 1, f"no single row for {host} in:\n{output}"
    return rows[0]


def cells(output: str, host: str) -> dict[str, str]:
    """A host's row of the plain-text table, by column header."""
    header = next(line for line in output.splitlines() if line.startswith("HOST "))
    names = header.split()
    starts = [header.index(f" {name} ") + 1 if i else 0 for i, name in enumerate(names[:-1])]
    starts.append(header.rindex(names[-1]))
    line = row(output, host)
    ends = [*starts[1:], len(line)]
    return {name: line[a:b].strip() for name, a, b in zip(names, starts, ends, strict=True)}


def tensorflow_version() -> str:
    for dist in ("tensorflow", "tensorflow-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel's backlog) but never says a word."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind((HOST, 0))
        server.listen(16)
        yield int(server.getsockname()[1])


def test_every_host_is_checked_at_once_and_reported_in_one_table(
        tmp_path: Path, ssh: SshSetup, silent_port: int) -> None:
    sshd, client_key, known_hosts = ssh.sshd, ssh.key, ssh.known_hosts
    wrong = generate_key(tmp_path / "wrong_key")
    checkpoint = tmp_path / "ckpt" / "deep" / "dir"
    spec = ssh.spec("mixed", checkpoint={"dir": str(checkpoint)})
    spec["hosts"].update({
        "closed": {**ssh_host_entry(sshd, client_key, known_hosts), "port": free_port()},
        "badkey": ssh_host_entry(sshd, wrong, known_hosts),
        "silent": {**ssh_host_entry(sshd, client_key, known_hosts), "port": silent_port},
    })
    spec["tasks"] = [{"type": "chief", "host": SSH_HOST, "port": free_port()},
                     *({"type": "worker", "host": host, "port": free_port()}
                       for host in ("closed", "badkey", "silent")),
                     {"type": "worker", "host": "localhost"}]
    result, took = preflight(write_spec(tmp_path, spec), "--connect-timeout",
                             str(CONNECT_TIMEOUT_S))
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    summary = re.search(r"not ready \(.*\) in ([0-9.]+)s$", out, re.MULTILINE)
    assert summary is not None, out
    assert float(summary.group(1)) < CONNECT_TIMEOUT_S + MARGIN_S, out
    assert took < CONNECT_TIMEOUT_S + PROCESS_MARGIN_S, f"tfcluster preflight took {took:.1f}s"
    assert out.count("HOST ") == 1  # one table
    good = cells(out, SSH_HOST)
    assert good["PYTHON"] == platform.python_version()
    assert good["TENSORFLOW"] == tensorflow_version()
    assert (good["CONNECT"], good["WORKER"], good["PORTS"]) == ("ok", "ok", "ok (1)")
    assert good["CHECKPOINT"] == "ok" and good["RESULT"].startswith("ok")
    assert "Connection refused" in row(out, "closed") and "unreachable" in row(out, "closed")
    assert "authentication failed" in row(out, "badkey")
    assert "SSH handshake failed" in row(out, "silent") or "no answer" in row(out, "silent")
    assert "local" in row(out, "localhost") and "FAIL" not in row(out, "localhost")
    assert f"badkey: authentication failed for root@127.0.0.1:{sshd.port}" in out
    assert str(wrong) in out  # the key that was tried
    assert not (tmp_path / "ckpt").exists()  # the SFTP probe removed what it created
    assert sshd.wait_no_sessions(5) == []


def test_a_ready_cluster_passes_and_checkpoint_and_ports_are_checked(
        tmp_path: Path, sshd: Sshd, client_key: Path, known_hosts: Path, mark: str) -> None:
    (tmp_path / "ckpt").mkdir()
    spec = ssh_spec("ready", sshd, client_key, known_hosts, mark=mark,
                    checkpoint={"dir": str(tmp_path / "ckpt")})
    result, _ = preflight(write_spec(tmp_path, spec))
    assert result.returncode == 0, result.stdout + result.stderr
    good = cells(result.stdout, SSH_HOST)
    assert good["PORTS"] == "ok (2)"  # both task ports free
    assert good["CHECKPOINT"] == "ok"
    assert "all 1 host(s) ready" in result.stdout
    assert list((tmp_path / "ckpt").iterdir()) == []  # the probe file is gone

    with socket.socket() as busy:  # now one task's port is taken on that host
        busy.bind(("0.0.0.0", spec["tasks"][0]["port"]))
        busy.listen()
        result, _ = preflight(write_spec(tmp_path, spec))
    assert result.returncode == 1
    assert f"port {spec['tasks'][0]['port']} of " in row(result.stdout, SSH_HOST)


def test_a_host_with_another_tfcluster_is_named_with_both_versions_and_the_fix(
        tmp_path: Path, ssh: SshSetup) -> None:
    other = tmp_path / "other-checkout"
    (other / "worker" / "wire").mkdir(parents=True)  # with the mark of tfcluster's own worker
    (other / "worker" / "__init__.py").write_text('__version__ = "0.0.0+other"\n')
    (other / MARKER).write_text("")
    spec = ssh.spec("other")
    spec["workdir"] = str(other)
    result, _ = preflight(write_spec(tmp_path, spec))
    assert result.returncode == 1, result.stdout + result.stderr
    assert cells(result.stdout, SSH_HOST)["TFCLUSTER"] == "0.0.0+other (DIFFERS)"
    assert f"FAIL: tfcluster 0.0.0+other here but {TFCLUSTER_VERSION} on the coordinator" in \
        row(result.stdout, SSH_HOST)
    assert f"install tfcluster {TFCLUSTER_VERSION} there" in result.stdout


def test_preflight_help() -> None:
    result = subprocess.run([sys.executable, "-m", "launcher", "preflight", "--help"],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0 and "--accept-new-host-keys" in result.stdout
