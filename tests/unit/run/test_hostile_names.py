"""Issue 25, items 1 and 8, at each place tfcluster opens a file in a directory others may write:
the checkpoint dir's lock (flock and over SFTP), checkpoint discovery, the run dir's summary and
task logs, TensorBoard's files, the agents' process tables, the port locks in /tmp. A planted
symlink is never written or read through, a FIFO never blocks; what is refused says so in one
line naming the file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

from launcher.chief.checkpoints import latest_checkpoint
from launcher.chief.flock_lock import FlockLockFile
from launcher.chief.lock import LOCK_NAME, CheckpointLockError, HolderRecord, held
from launcher.chief.remote_lock import ExclusiveLockFile, SftpLockDir
from launcher.output.metrics import MetricsSink, Report
from launcher.output.task_logs import TaskLogs
from launcher.plan.ports import PortAllocator, PortLockError
from launcher.run.directory import RunDir
from tests.unit.run.conftest import VICTIM_TEXT
from worker.wire.process_table import ProcessTableError, read_table, write_table
from worker.wire.tfconfig import TaskId

pytestmark = pytest.mark.timeout(30)  # a FIFO that blocked an open would hang: a failure



class PathsSftp:
    """The calls of paramiko's ``SFTPClient`` a lock makes before it reads the file, on local
    paths (an exclusive create of an existing name fails as a bare SFTP failure)."""

    def open(self, filename: str, mode: str = "r") -> NoReturn:
        assert mode == "wx", f"only the exclusive create may open before the lstat ({mode})"
        os.close(os.open(filename, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        raise AssertionError("the exclusive create should have failed")

    def stat(self, path: str) -> os.stat_result:
        return os.stat(path)

    def lstat(self, path: str) -> os.stat_result:
        return os.lstat(path)

    def mkdir(self, path: str) -> None:
        os.mkdir(path)

    def rename(self, oldpath: str, newpath: str) -> None:
        raise AssertionError("nothing is moved aside")

    def remove(self, path: str) -> None:
        raise AssertionError("nothing is removed")


def record() -> HolderRecord:
    return HolderRecord(host="here", pid=os.getpid(), started=1.0, job="digits",
                        run_dir="runs/digits-1", heartbeat=None)


def take(lock: FlockLockFile | ExclusiveLockFile, directory: Path) -> str:
    """What ``held`` refuses the lock with (it must refuse)."""
    with pytest.raises(CheckpointLockError) as refused, \
            held(lock, str(directory), record(), warn=lambda _: None):
        pass
    return str(refused.value)


@pytest.mark.parametrize("plant", ["symlink", "fifo", "hard link"])
def test_the_flock_lock_refuses_what_was_planted_at_its_name(
        tmp_path: Path, victim: Path, plant: str) -> None:
    lock = tmp_path / "checkpoints" / LOCK_NAME
    lock.parent.mkdir()
    {"symlink": lambda: lock.symlink_to(victim), "fifo": lambda: os.mkfifo(lock),
     "hard link": lambda: os.link(victim, lock)}[plant]()
    message = take(FlockLockFile(str(lock.parent)), lock.parent)
    assert message.startswith(f"{lock} is a ") and "\n" not in message
    assert message.endswith("tfcluster will not write through it; remove it if it is not yours")
    assert victim.read_text() == VICTIM_TEXT


def test_the_remote_lock_refuses_a_symlink_at_its_name(tmp_path: Path, victim: Path) -> None:
    lock = tmp_path / "checkpoints" / LOCK_NAME
    lock.parent.mkdir()
    lock.symlink_to(victim)
    remote = ExclusiveLockFile(SftpLockDir(PathsSftp()), str(lock.parent), this_host="here")
    assert take(remote, lock.parent).startswith(f"{lock} is a symlink: tfcluster will not read")
    assert victim.read_text() == VICTIM_TEXT


def test_discovery_names_a_fifo_state_file_and_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "checkpoint")
    found = latest_checkpoint(str(tmp_path))
    assert found.checkpoint is None
    assert [(s.prefix, s.reason) for s in found.skipped] == [
        (str(tmp_path / "checkpoint"),
         "the state file is a FIFO: not read (remove it if it is not yours)")]


def test_summary_json_replaces_a_planted_symlink_never_its_target(
        tmp_path: Path, victim: Path) -> None:
    run_dir = RunDir(tmp_path / "run")
    run_dir.path.mkdir()
    run_dir.summary.symlink_to(victim)
    for temporary in ("summary.json.tmp", f".summary.json.{os.getpid()}.tmp"):  # predictable
        (run_dir.path / temporary).symlink_to(victim)
    run_dir.write_summary({"job": "digits"})
    assert victim.read_text() == VICTIM_TEXT
    assert not run_dir.summary.is_symlink()


def test_a_symlinked_task_log_is_reported_once_not_appended_to(
        tmp_path: Path, victim: Path) -> None:
    run_dir = RunDir(tmp_path / "run")
    run_dir.attempt_dir(0).mkdir(parents=True)
    run_dir.task_log(0, TaskId.parse("worker:0")).symlink_to(victim)
    errors: list[str] = []
    logs = TaskLogs(run_dir, 0, on_error=errors.append)
    logs.write("worker:0", "a line")
    logs.close()
    assert victim.read_text() == VICTIM_TEXT
    assert len(errors) == 1 and "worker-0.log is a symlink" in errors[0]


def test_a_symlinked_attempt_dir_is_refused(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path / "run")
    run_dir.path.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_dir.attempt_dir(0).symlink_to(elsewhere)
    with pytest.raises(OSError, match="attempt-0 is a symlink"):
        TaskLogs(run_dir, 0)


def test_tensorboard_files_are_never_made_through_a_planted_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run_dir / "tensorboard").symlink_to(elsewhere)
    warned: list[str] = []
    sink = MetricsSink(run_dir, warn=warned.append)
    sink.report(Report(ts=1.0, attempt=0, task="worker:0", step=1, metrics={"loss": 0.5}))
    sink.close()
    assert not list(elsewhere.iterdir())
    assert any("tensorboard is a symlink" in w for w in warned), warned


def test_a_process_table_is_never_written_or_read_through_a_symlink(
        tmp_path: Path, victim: Path) -> None:
    table = tmp_path / "agents" / "localhost.processes.json"
    table.parent.mkdir()
    table.symlink_to(victim)
    with pytest.raises(ProcessTableError, match="is a symlink"):
        read_table(table)
    write_table(table, [])
    assert victim.read_text() == VICTIM_TEXT
    assert read_table(table) == []


def test_a_fifo_process_table_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "localhost.processes.json")
    with pytest.raises(ProcessTableError, match="is a FIFO"):
        read_table(tmp_path / "localhost.processes.json")


def test_port_locks_refuse_a_planted_lock_directory(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "ports").symlink_to(elsewhere)
    with pytest.raises(PortLockError, match="is a symlink"):
        PortAllocator(lock_dir=str(tmp_path / "ports")).allocate(1)
    assert not list(elsewhere.iterdir())
