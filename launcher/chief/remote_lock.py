"""The checkpoint directory's lock when the chief is remote, reached over SFTP (see
:mod:`launcher.chief.lock`).

SFTP has no ``flock``, so the lock is an exclusive create (``O_EXCL``: paramiko's mode ``"wx"``) of
``<dir>/.tfcluster.lock`` holding the holder's record and a heartbeat that the coordinator refreshes
every :data:`HEARTBEAT_S`. It is stale when the heartbeat is older than :data:`STALE_AFTER_S`
(heartbeats are the writers' wall clocks: the bound is far above any sane clock skew), or at once
when its holder ran on this machine and that process is gone. A stale lock is moved aside under a
unique name before it is replaced, so two runs taking over the same stale lock cannot both win.

File access is the :class:`LockDir` interface: :class:`SftpLockDir` over a paramiko
``SFTPClient`` (anything shaped like :class:`SftpClient`), which tests drive over a local directory.
"""

from __future__ import annotations

import contextlib
import posixpath
import socket
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Protocol

from launcher.chief.lock import (
    LOCK_NAME,
    Acquired,
    Busy,
    HolderRecord,
    LockFile,
    process_alive,
)
from worker.wire.safe_open import UnsafeFileError, kind_of

#: How often the coordinator renews a remote lock's heartbeat.
HEARTBEAT_S = 10.0
#: A remote lock whose heartbeat is older than this is stale (six missed heartbeats).
STALE_AFTER_S = 60.0
#: How often acquire retries when the lock changed hands while it looked at it.
ACQUIRE_TRIES = 5
#: paramiko's mode for an exclusive create to write: "w" (write, create, truncate) + "x" (O_EXCL);
#: "x" alone creates the file without opening it for writing.
EXCLUSIVE_WRITE = "wx"


class SftpFile(Protocol):
    def read(self) -> bytes: ...

    def write(self, data: bytes) -> None: ...

    def __enter__(self) -> SftpFile: ...

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None: ...


class SftpAttributes(Protocol):
    @property
    def st_mtime(self) -> float | None: ...

    @property
    def st_mode(self) -> int | None: ...


class SftpClient(Protocol):
    """The part of ``paramiko.SFTPClient`` the lock uses."""

    def open(self, filename: str, mode: str = "r") -> SftpFile: ...

    def rename(self, oldpath: str, newpath: str) -> None: ...

    def remove(self, path: str) -> None: ...

    def mkdir(self, path: str) -> None: ...

    def stat(self, path: str) -> SftpAttributes: ...

    def lstat(self, path: str) -> SftpAttributes: ...


class LockDir(Protocol):
    """The file operations of a lock in a directory that may be on another host."""

    def create_exclusive(self, path: str, text: str) -> bool:
        """Create ``path`` holding ``text`` unless it exists (then False)."""

    def read_text(self, path: str) -> str | None:
        """The file's text, None when it does not exist."""

    def write_text(self, path: str, text: str) -> None: ...

    def rename(self, path: str, new_path: str) -> bool:
        """Rename unless ``path`` is gone (then False); ``new_path`` must not exist."""

    def remove(self, path: str) -> None: ...

    def makedirs(self, path: str) -> None: ...

    def mtime(self, path: str) -> float | None: ...


class SftpLockDir:
    """:class:`LockDir` over SFTP. SFTP servers report an exclusive create of an existing file as
    a bare failure, so existence is checked when one fails.

    SFTP has no ``O_NOFOLLOW`` nor ``O_NONBLOCK``: before a lock file is read or rewritten, its
    name is looked at with ``lstat`` and anything but a regular file (a symlink planted to a
    victim's file, a FIFO that would block the server's open) is refused with
    :class:`~worker.wire.safe_open.UnsafeFileError`. The exclusive create needs no look:
    ``O_EXCL`` fails on any existing name, a symlink included."""

    def __init__(self, sftp: SftpClient) -> None:
        self.sftp = sftp

    def create_exclusive(self, path: str, text: str) -> bool:
        try:
            with self.sftp.open(path, EXCLUSIVE_WRITE) as handle:
                handle.write(text.encode())
        except OSError:
            if self.mtime(path) is not None:
                return False
            raise
        return True

    def _refuse_unless_regular(self, path: str, *, writing: bool) -> None:
        try:
            mode = self.sftp.lstat(path).st_mode
        except FileNotFoundError:
            return
        if mode is not None and not stat.S_ISREG(mode):
            raise UnsafeFileError(path, kind_of(mode), writing=writing)

    def read_text(self, path: str) -> str | None:
        self._refuse_unless_regular(path, writing=False)
        try:
            with self.sftp.open(path, "r") as handle:
                return handle.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return None
        except OSError:
            if self.mtime(path) is None:
                return None
            raise

    def write_text(self, path: str, text: str) -> None:
        self._refuse_unless_regular(path, writing=True)
        with self.sftp.open(path, "w") as handle:
            handle.write(text.encode())

    def rename(self, path: str, new_path: str) -> bool:
        try:
            self.sftp.rename(path, new_path)
        except OSError:
            if self.mtime(path) is None:
                return False
            raise
        return True

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.sftp.remove(path)

    def makedirs(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        current = "/" if path.startswith("/") else ""
        for part in parts:
            current = posixpath.join(current, part) if current else part
            if self.mtime(current) is None:
                try:
                    self.sftp.mkdir(current)
                except OSError:
                    if self.mtime(current) is None:
                        raise

    def mtime(self, path: str) -> float | None:
        try:
            return self.sftp.stat(path).st_mtime
        except OSError:
            return None


def is_stale(holder: HolderRecord | None, *, now: float, mtime: float | None, this_host: str,
             alive: Callable[[int, float], bool], stale_after_s: float = STALE_AFTER_S) -> bool:
    """Whether a remote lock may be taken over: its holder ran here and is gone, or its heartbeat
    (the file's mtime when the record is unreadable, e.g. still being written) is too old."""
    if holder is not None and holder.host == this_host and not alive(holder.pid, holder.started):
        return True
    beat = mtime if holder is None or holder.heartbeat is None else holder.heartbeat
    return beat is not None and now - beat > stale_after_s


class ExclusiveLockFile:
    """A :class:`~launcher.chief.lock.LockFile` made by an exclusive create, kept alive by
    its heartbeat."""

    def __init__(self, files: LockDir, directory: str, *, heartbeat_s: float = HEARTBEAT_S,
                 stale_after_s: float = STALE_AFTER_S, this_host: str | None = None,
                 clock: Callable[[], float] = time.time,
                 alive: Callable[[int, float], bool] = process_alive) -> None:
        self.files = files
        self.directory = directory
        self.path = posixpath.join(directory, LOCK_NAME)
        self.heartbeat_s: float | None = heartbeat_s
        self.stale_after_s = stale_after_s
        self.this_host = this_host or socket.gethostname()
        self.clock = clock
        self.alive = alive
        self._mine: HolderRecord | None = None

    def acquire(self, record: HolderRecord) -> Acquired | Busy:
        self.files.makedirs(self.directory)
        stale: HolderRecord | None = None
        for _ in range(ACQUIRE_TRIES):
            if self.files.create_exclusive(self.path, record.to_json()):
                self._mine = record
                return Acquired(stale)
            text = self.files.read_text(self.path)
            if text is None:  # released meanwhile
                continue
            holder = HolderRecord.parse(text)
            if not is_stale(holder, now=self.clock(), mtime=self.files.mtime(self.path),
                            this_host=self.this_host, alive=self.alive,
                            stale_after_s=self.stale_after_s):
                return Busy(holder)
            if self._move_aside(text):
                stale = holder
        return Busy(HolderRecord.parse(self.files.read_text(self.path)))

    def _move_aside(self, seen: str) -> bool:
        """Remove the stale lock whose text is ``seen``, unless someone else got to it first."""
        aside = f"{self.path}.stale-{uuid.uuid4().hex}"
        if not self.files.rename(self.path, aside):
            return False
        if self.files.read_text(aside) != seen:  # it changed hands meanwhile: put it back
            self.files.rename(aside, self.path)
            return False
        self.files.remove(aside)
        return True

    def refresh(self, record: HolderRecord) -> bool:
        if self._mine is None or not self._mine.same_holder(
                HolderRecord.parse(self.files.read_text(self.path))):
            return False
        self.files.write_text(self.path, record.to_json())
        return True

    def release(self) -> None:
        mine, self._mine = self._mine, None
        if mine is not None and mine.same_holder(
                HolderRecord.parse(self.files.read_text(self.path))):
            self.files.remove(self.path)


class HasSftp(Protocol):
    """An open SFTP view of a host (``launcher.ssh.sftp.SftpFS`` is one)."""

    @property
    def sftp(self) -> SftpClient: ...


@contextlib.contextmanager
def sftp_lock_file(connection: AbstractContextManager[HasSftp | None],
                   directory: str) -> Iterator[LockFile | None]:
    """The lock of ``directory`` over ``connection`` (held open for the time of the ``with``, so
    the heartbeat can reach the host); None when the host cannot be reached."""
    with connection as opened:
        yield None if opened is None else ExclusiveLockFile(SftpLockDir(opened.sftp), directory)
