"""Issue 7 B over real SSH (sshd on 127.0.0.1): the remote variant of the checkpoint directory's
lock on a real SFTP server (OpenSSH's sftp-server, through paramiko and SftpFS), and two real runs
whose chief is remote refused from sharing its checkpoint directory."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from launcher.backends.ssh.engine import ssh_host
from launcher.chief.lock import LOCK_NAME, Acquired, Busy, HolderRecord
from launcher.chief.remote_lock import SftpLockDir, sftp_lock_file
from launcher.spec.loading import spec_from_dict
from launcher.ssh.config import SshHost
from launcher.ssh.connector import SshConnector
from launcher.ssh.sftp import remote_checkpoint_fs
from tests.ssh.remote import SshSetup
from tests.support.jobs import running, write_spec
from tests.support.planning import named_planner

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(90)]


def chief_host(ssh: SshSetup, tmp_path: Path) -> SshHost:
    spec = spec_from_dict(ssh.spec("locked", checkpoint={"dir": str(tmp_path / "ckpt")}))
    host = named_planner(spec, str(tmp_path / "run")).preview().chief_host
    assert not host.local
    return ssh_host(spec, host.name)


def record(job: str) -> HolderRecord:
    return HolderRecord(host="elsewhere", pid=1, started=1.0, job=job, run_dir=f"runs/{job}",
                        heartbeat=9e9)  # a heartbeat far in the future: never stale here


def test_the_remote_lock_on_a_real_sftp_server(ssh: SshSetup, tmp_path: Path) -> None:
    host, directory = chief_host(ssh, tmp_path), str(tmp_path / "ckpt" / "deep")
    connector = SshConnector(connect_timeout_s=10)
    with sftp_lock_file(remote_checkpoint_fs(connector, host), directory) as first, \
            sftp_lock_file(remote_checkpoint_fs(connector, host), directory) as second:
        assert first is not None and second is not None
        assert first.acquire(record("first")) == Acquired(None)
        lock = Path(directory) / LOCK_NAME
        assert HolderRecord.parse(lock.read_text()) == record("first")
        assert second.acquire(record("second")) == Busy(record("first"))
        assert first.refresh(record("first")) is True
        assert second.refresh(record("second")) is False
        first.release()
        assert not lock.exists()
        assert second.acquire(record("second")) == Acquired(None)
        second.release()


def test_an_exclusive_create_over_sftp_refuses_an_existing_file(
        ssh: SshSetup, tmp_path: Path) -> None:
    with remote_checkpoint_fs(SshConnector(connect_timeout_s=10),
                              chief_host(ssh, tmp_path)) as fs:
        assert fs is not None
        files = SftpLockDir(fs.sftp)
        path = str(tmp_path / "f")
        assert files.create_exclusive(path, "one") is True
        assert files.create_exclusive(path, "two") is False
        assert files.read_text(path) == "one"
        assert files.rename(str(tmp_path / "missing"), str(tmp_path / "g")) is False


def test_a_second_run_on_a_remote_chiefs_checkpoint_dir_is_refused(
        ssh: SshSetup, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    spec = write_spec(tmp_path, ssh.spec("remote-twin", checkpoint={"dir": str(ckpt)}, args=[
        "--steps", "100000", "--step-time", "0.02", "--checkpoint-every", "10"]))
    with running(["run", str(spec)], tmp_path / "first", tmp_path) as first:
        first.wait_event(lambda e: e["event"] == "task_progress" and e["step"] >= 5)
        holder = json.loads((ckpt / LOCK_NAME).read_text())
        assert holder["pid"] == first.proc.pid and holder["heartbeat"] is not None
        with running(["run", str(spec)], tmp_path / "second", tmp_path) as second:
            assert second.wait(60) == 1
        assert second.stderr.strip().splitlines()[-1] == (
            f"tfcluster: checkpoint dir {ckpt} is in use by job remote-twin (pid "
            f"{first.proc.pid} on host {socket.gethostname()}, run dir {tmp_path / 'first'}); "
            "wait for it or use another checkpoint.dir")
        assert first.proc.poll() is None
