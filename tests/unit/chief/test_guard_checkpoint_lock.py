"""Issue 7 B: the lock a run holds on its checkpoint directory, both variants.

The remote variant (exclusive create + heartbeat, over SFTP) runs here against ``LocalDirSftp``, a
local-directory stand-in of paramiko's ``SFTPClient`` (what ``launcher.ssh.sftp.SftpFS`` wraps)
that keeps the SFTP behaviours the lock depends on: an exclusive create of an existing file fails
with a bare error (no errno, as an SFTP server's SSH_FX_FAILURE reaches paramiko) and a rename onto
an existing file fails. The local variant (``flock``) runs on real files, with a real process that
is SIGKILLed while it holds the lock.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO

import psutil
import pytest

from launcher.chief.flock_lock import FlockLockFile
from launcher.chief.lock import (
    LOCK_NAME,
    Acquired,
    Busy,
    CheckpointDirInUse,
    CheckpointLockError,
    HolderRecord,
    held,
    process_alive,
    start_time,
)
from launcher.chief.remote_lock import ExclusiveLockFile, SftpLockDir, is_stale
from tests.support.agent_harness import wait_for

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[3]
HERE = "this-host"
DEADLINE_S = 10.0


class LocalFile:
    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle

    def read(self) -> bytes:
        return self.handle.read()

    def write(self, data: bytes) -> None:
        self.handle.write(data)

    def __enter__(self) -> LocalFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.handle.close()


class LocalDirSftp:
    """paramiko ``SFTPClient``'s methods, on local paths; ``open`` turns its mode into flags as
    paramiko does ("x" alone creates the file but does not open it for writing)."""

    def open(self, filename: str, mode: str = "r") -> LocalFile:
        writes = any(c in mode for c in "wa+")
        access = (os.O_RDWR if writes and ("r" in mode or "+" in mode)
                  else os.O_WRONLY if writes else os.O_RDONLY)
        flags = access
        if "w" in mode:
            flags |= os.O_CREAT | os.O_TRUNC
        if "a" in mode:
            flags |= os.O_CREAT | os.O_APPEND
        if "x" in mode:
            flags |= os.O_CREAT | os.O_EXCL
        try:
            fd = os.open(filename, flags, 0o644)
        except FileExistsError:
            raise OSError("Failure") from None  # SSH_FX_FAILURE carries no errno
        return LocalFile(os.fdopen(fd, {os.O_RDONLY: "rb", os.O_WRONLY: "wb",
                                        os.O_RDWR: "r+b"}[access]))

    def rename(self, oldpath: str, newpath: str) -> None:
        if os.path.exists(newpath):
            raise OSError("Failure")
        os.rename(oldpath, newpath)

    def remove(self, path: str) -> None:
        os.remove(path)

    def mkdir(self, path: str) -> None:
        os.mkdir(path)

    def stat(self, path: str) -> os.stat_result:
        return os.stat(path)

    def lstat(self, path: str) -> os.stat_result:
        return os.lstat(path)


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def record(job: str = "digits", host: str = "node-a", pid: int = 1234,
           beat: float | None = 1_000_000.0) -> HolderRecord:
    return HolderRecord(host=host, pid=pid, started=99.0, job=job, run_dir=f"runs/{job}-1",
                        heartbeat=beat)


def remote(directory: Path, clock: Clock, *, host: str = HERE,
           alive: Callable[[int, float], bool] = lambda pid, started: True,
           files: SftpLockDir | None = None, heartbeat_s: float = 10.0) -> ExclusiveLockFile:
    return ExclusiveLockFile(files or SftpLockDir(LocalDirSftp()), str(directory),
                             heartbeat_s=heartbeat_s, stale_after_s=60.0, this_host=host,
                             clock=clock, alive=alive)


def lock_text(directory: Path) -> HolderRecord | None:
    return HolderRecord.parse((directory / LOCK_NAME).read_text())


def dead_process() -> tuple[int, float]:
    """The pid and start time of a process of this machine that has exited (and was reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    started = psutil.Process(proc.pid).create_time()
    proc.communicate(timeout=DEADLINE_S)
    return proc.pid, started


# --- the remote variant --------------------------------------------------------------------------


def test_remote_lock_is_created_with_its_directory_and_holds_the_record(tmp_path: Path) -> None:
    directory = tmp_path / "a" / "b" / "ckpt"
    lock = remote(directory, Clock())
    assert lock.acquire(record()) == Acquired(None)
    data = json.loads((directory / LOCK_NAME).read_text())
    assert data == {"host": "node-a", "pid": 1234, "started": 99.0, "job": "digits",
                    "run_dir": "runs/digits-1", "heartbeat": 1_000_000.0}


def test_a_live_remote_lock_is_busy_and_a_second_run_is_refused(tmp_path: Path) -> None:
    clock = Clock()
    assert remote(tmp_path, clock).acquire(record()) == Acquired(None)
    clock.now += 59.0  # within the bound
    assert remote(tmp_path, clock, host="node-b").acquire(record("other", "node-b")) == \
        Busy(record())
    with pytest.raises(CheckpointDirInUse) as caught, \
            held(remote(tmp_path, clock), str(tmp_path), record("other"), print):
        pass
    assert str(caught.value) == (f"checkpoint dir {tmp_path} is in use by job digits (pid 1234 "
                                 "on host node-a, run dir runs/digits-1); wait for it or use "
                                 "another checkpoint.dir")


def test_an_old_heartbeat_is_stale_and_taken_over(tmp_path: Path) -> None:
    clock = Clock()
    first = remote(tmp_path, clock)
    first.acquire(record())
    clock.now += 61.0
    second = remote(tmp_path, clock, host="node-b")
    mine = record("second", "node-b", beat=clock.now)
    assert second.acquire(mine) == Acquired(stale=record())
    assert lock_text(tmp_path) == mine
    assert first.refresh(record(beat=clock.now)) is False  # it lost the lock and knows it
    first.release()
    assert lock_text(tmp_path) == mine  # the first never removes the second's lock
    assert [p.name for p in tmp_path.iterdir()] == [LOCK_NAME]  # nothing left aside


def test_a_dead_holder_on_this_machine_is_stale_at_once(tmp_path: Path) -> None:
    pid, started = dead_process()
    clock = Clock()
    left = HolderRecord(host=HERE, pid=pid, started=started, job="digits", run_dir="r",
                        heartbeat=clock.now)
    (tmp_path / LOCK_NAME).write_text(left.to_json())
    lock = remote(tmp_path, clock, alive=process_alive)
    assert lock.acquire(record("next", HERE)) == Acquired(stale=left)


def test_a_live_holder_on_this_machine_is_busy(tmp_path: Path) -> None:
    me = HolderRecord.this_process("digits", "runs/x").beating(Clock()())
    (tmp_path / LOCK_NAME).write_text(me.to_json())
    lock = remote(tmp_path, Clock(), host=me.host, alive=process_alive)
    assert lock.acquire(record("next", me.host)) == Busy(me)


def test_an_unreadable_lock_is_busy_until_its_file_is_old(tmp_path: Path) -> None:
    path = tmp_path / LOCK_NAME
    path.write_text("{half a reco")
    now = time.time()
    assert remote(tmp_path, Clock(now + 5)).acquire(record()) == Busy(None)
    os.utime(path, (now - 3600, now - 3600))
    assert remote(tmp_path, Clock(now)).acquire(record()) == Acquired(None)
    assert lock_text(tmp_path) == record()


def test_refresh_renews_the_heartbeat_and_release_removes_the_lock(tmp_path: Path) -> None:
    clock = Clock()
    lock = remote(tmp_path, clock)
    lock.acquire(record())
    assert lock.refresh(record(beat=clock.now + 10)) is True
    assert lock_text(tmp_path) == record(beat=clock.now + 10)
    lock.release()
    lock.release()  # safe twice
    assert not (tmp_path / LOCK_NAME).exists()


class TakenOverMeanwhile(SftpLockDir):
    """B's view of the files, in which run A takes the stale lock over just after B read it."""

    def __init__(self, other: Callable[[], object]) -> None:
        super().__init__(LocalDirSftp())
        self.other: Callable[[], object] | None = other

    def read_text(self, path: str) -> str | None:
        text = super().read_text(path)
        if self.other is not None:
            other, self.other = self.other, None
            other()
        return text


def test_two_runs_taking_over_one_stale_lock_cannot_both_win(tmp_path: Path) -> None:
    clock = Clock()
    remote(tmp_path, clock).acquire(record("dead"))
    clock.now += 120.0
    a_record = record("a", "node-a", beat=clock.now)
    run_a = remote(tmp_path, clock, host="node-a")
    run_b = remote(tmp_path, clock, host="node-b",
                   files=TakenOverMeanwhile(lambda: run_a.acquire(a_record)))
    assert run_b.acquire(record("b", "node-b", beat=clock.now)) == Busy(a_record)
    assert lock_text(tmp_path) == a_record
    assert run_a.refresh(a_record) is True


def test_held_keeps_the_heartbeat_beating_and_removes_the_lock(tmp_path: Path) -> None:
    lock = remote(tmp_path, Clock(), heartbeat_s=0.02)
    warnings: list[str] = []
    with held(lock, str(tmp_path), record(beat=None), warnings.append):
        first = lock_text(tmp_path)
        assert first is not None and first.heartbeat is not None
        deadline = time.monotonic() + DEADLINE_S
        while (now := lock_text(tmp_path)) is None or now.heartbeat == first.heartbeat:
            assert time.monotonic() < deadline, "the heartbeat was never refreshed"
            time.sleep(0.01)  # polling a file against a deadline, not synchronising on time
    assert not (tmp_path / LOCK_NAME).exists()
    assert warnings == []


def test_held_says_in_one_line_that_it_took_over_a_stale_lock(tmp_path: Path) -> None:
    clock = Clock()
    remote(tmp_path, clock).acquire(record("digits"))
    clock.now += 61.0
    warnings: list[str] = []
    with held(remote(tmp_path, clock), str(tmp_path), record("next"), warnings.append):
        pass
    assert warnings == [f"checkpoint dir {tmp_path}: taking over the stale lock of job digits "
                        "(pid 1234 on host node-a, run dir runs/digits-1): that run is gone"]


def test_the_stand_in_opens_like_paramiko(tmp_path: Path) -> None:
    """Mode "x" alone creates a file it cannot write (the bug a real sftp-server showed)."""
    with pytest.raises(io.UnsupportedOperation), LocalDirSftp().open(str(tmp_path / "f"), "x") as handle:
        handle.write(b"lock")


def test_sftp_lock_dir_over_the_stand_in(tmp_path: Path) -> None:
    files = SftpLockDir(LocalDirSftp())
    path = str(tmp_path / "f")
    assert files.create_exclusive(path, "one") is True
    assert files.create_exclusive(path, "two") is False
    assert files.read_text(path) == "one"
    assert files.read_text(str(tmp_path / "missing")) is None
    assert files.rename(str(tmp_path / "missing"), str(tmp_path / "g")) is False
    files.makedirs(str(tmp_path / "x" / "y"))
    files.makedirs(str(tmp_path / "x" / "y"))
    assert (tmp_path / "x" / "y").is_dir()
    files.remove(path)
    files.remove(path)
    assert files.mtime(path) is None


@pytest.mark.parametrize(
    ("holder", "mtime", "alive", "stale"),
    [
        pytest.param(record(beat=1000.0), None, True, False, id="fresh-heartbeat"),
        pytest.param(record(beat=939.0), None, True, True, id="old-heartbeat"),
        pytest.param(record(host=HERE, beat=1000.0), None, False, True, id="dead-here"),
        pytest.param(record(host=HERE, beat=1000.0), None, True, False, id="alive-here"),
        pytest.param(record(host="elsewhere", beat=1000.0), None, False, False,
                     id="pid-of-another-host-is-not-checked"),
        pytest.param(record(beat=None), 939.0, True, True, id="no-heartbeat-old-file"),
        pytest.param(None, 990.0, True, False, id="unreadable-fresh-file"),
        pytest.param(None, None, True, False, id="unreadable-no-mtime"),
    ],
)
def test_is_stale(holder: HolderRecord | None, mtime: float | None, alive: bool,
                  stale: bool) -> None:
    assert is_stale(holder, now=1000.0, mtime=mtime, this_host=HERE,
                    alive=lambda pid, started: alive, stale_after_s=60.0) is stale


def test_process_alive_checks_the_start_time() -> None:
    me = psutil.Process(os.getpid()).create_time()
    assert process_alive(os.getpid(), me)
    assert not process_alive(os.getpid(), me - 3600)  # the pid was reused
    assert not process_alive(*dead_process())


def test_a_holders_start_time_is_psutils_so_either_reads_the_others_lock_files() -> None:
    """Read from ``/proc`` (no psutil import before a run starts), it is the value psutil gives:
    a lock written by an older tfcluster is still recognised, and the other way round."""
    record = HolderRecord.this_process("digits", "runs/x")
    assert abs(record.started - psutil.Process(os.getpid()).create_time()) < 0.02
    assert start_time(dead_process()[0]) is None


def test_a_zombie_holds_no_lock() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    started = start_time(proc.pid)
    assert started is not None and process_alive(proc.pid, started)
    wait_for(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE, DEADLINE_S)
    assert not process_alive(proc.pid, started)
    proc.wait()


def test_holder_record_parse_rejects_what_is_not_one() -> None:
    assert HolderRecord.parse(None) is None
    assert HolderRecord.parse("") is None
    assert HolderRecord.parse("[1, 2]") is None
    assert HolderRecord.parse('{"host": "h"}') is None
    assert HolderRecord.parse(record().to_json()) == record()


# --- the local variant (flock) -------------------------------------------------------------------


def test_flock_refuses_a_second_holder_until_the_first_releases(tmp_path: Path) -> None:
    directory = tmp_path / "new" / "ckpt"
    first, second = FlockLockFile(str(directory)), FlockLockFile(str(directory))
    assert first.acquire(record("first")) == Acquired(None)
    assert second.acquire(record("second")) == Busy(record("first"))
    first.release()
    assert not (directory / LOCK_NAME).exists()
    assert second.acquire(record("second")) == Acquired(None)
    second.release()
    second.release()  # safe twice


HOLD_LOCK = """
import sys
from launcher.chief.lock import HolderRecord
from launcher.chief.flock_lock import FlockLockFile
lock = FlockLockFile(sys.argv[1])
print(type(lock.acquire(HolderRecord.this_process("held", "runs/held"))).__name__, flush=True)
sys.stdin.read()
"""


def test_a_flock_left_by_a_sigkilled_process_is_stale(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path)], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "Acquired"
        holder = lock_text(tmp_path)
        assert holder is not None and holder.pid == proc.pid
        assert FlockLockFile(str(tmp_path)).acquire(record()) == Busy(holder)
        proc.send_signal(signal.SIGKILL)
        proc.wait(DEADLINE_S)
        lock = FlockLockFile(str(tmp_path))
        assert lock.acquire(record()) == Acquired(stale=holder)
        lock.release()
    finally:
        proc.kill()
        proc.communicate(timeout=DEADLINE_S)


def test_a_checkpoint_dir_that_cannot_be_made_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    directory = str(tmp_path / "file" / "ckpt")
    with pytest.raises(CheckpointLockError) as caught, \
            held(FlockLockFile(directory), directory, record(), print):
        pass
    assert str(caught.value).startswith(f"checkpoint dir {directory}: cannot create its lock file "
                                        f"{LOCK_NAME}: Not a directory (")
