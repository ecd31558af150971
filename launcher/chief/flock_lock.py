"""The checkpoint directory's lock when the chief is local: ``flock`` on
``<dir>/.tfcluster.lock`` (see :mod:`launcher.chief.lock`).

The kernel releases a ``flock`` when its holder dies however it dies (SIGKILL included), so a lock
file whose ``flock`` can be taken is stale, whatever it says: its record is only read to name the
run that left it. The descriptor is close-on-exec (agents and tasks never inherit the lock), and
the file is removed at release; because another run may have opened the old file just before, a
lock counts as taken only when the locked descriptor is still the file at the path.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from launcher.chief.lock import LOCK_NAME, Acquired, Busy, HolderRecord
from worker.wire.safe_open import open_at, open_dir, truncate_ours

#: Most bytes of a lock file that are read (a record is a few hundred).
MAX_RECORD_BYTES = 64 * 1024
#: How often acquire retries when the file it locked was removed meanwhile by its releasing holder.
REOPEN_TRIES = 10


def _read(fd: int) -> str:
    return os.pread(fd, MAX_RECORD_BYTES, 0).decode("utf-8", "replace")


def _is_file_at(fd: int, path: str) -> bool:
    try:
        here = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


class FlockLockFile:
    """A :class:`~launcher.chief.lock.LockFile` held with ``flock`` for the life of this
    process (or until :meth:`release`)."""

    heartbeat_s: float | None = None  # the kernel knows whether the holder lives

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, LOCK_NAME)
        self._fd: int | None = None

    def acquire(self, record: HolderRecord) -> Acquired | Busy:
        """The lock file is opened as :mod:`worker.wire.safe_open` opens files in shared places:
        a symlink, a FIFO, a hard link or another user's file at its name is refused
        (:class:`~worker.wire.safe_open.UnsafeFileError`), never written through."""
        os.makedirs(self.directory, exist_ok=True)
        dir_fd = open_dir(self.directory)
        try:
            return self._acquire(dir_fd, record)
        finally:
            os.close(dir_fd)

    def _acquire(self, dir_fd: int, record: HolderRecord) -> Acquired | Busy:
        for _ in range(REOPEN_TRIES):
            fd = open_at(dir_fd, LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644, display=self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = HolderRecord.parse(_read(fd))
                os.close(fd)
                return Busy(holder)
            except BaseException:
                os.close(fd)
                raise
            if not _is_file_at(fd, self.path):  # its holder removed it as we opened it
                os.close(fd)
                continue
            try:
                stale = HolderRecord.parse(_read(fd))
                truncate_ours(fd, self.path)
                os.pwrite(fd, record.to_json().encode(), 0)
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            return Acquired(stale)
        raise BlockingIOError(f"{self.path} kept being replaced while it was being locked")

    def refresh(self, record: HolderRecord) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if _is_file_at(fd, self.path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)  # before the unlock: nobody can lock it in between
        finally:
            os.close(fd)
