"""The storage half of the doctor's program: how fast this host writes and reads a directory (the
checkpoint directory), as a chief saving and a restarted job restoring would.

One test file, created with ``O_EXCL | O_NOFOLLOW`` inside the directory (opened once, the file
named relative to it), is written with random bytes (compression cannot flatter it) until its size
or the time budget is reached, then ``fsync``\\ ed: the write time is the data on the device, not in
the page cache. Its pages are then dropped (``posix_fadvise(DONTNEED)``) and it is read back: the
read time is the device's (or the file server's), not memory's. The file is always removed, and
the directories created for it too.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from dataclasses import dataclass

#: The test file's name starts with this (a leftover, if the host died mid-test, says whose it is).
TEST_FILE_PREFIX = ".tfcluster-doctor-"
_CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class StorageSpeed:
    write_bytes: int
    write_s: float
    read_bytes: int
    read_s: float
    #: Whether the file's pages could be dropped before reading (not on every OS).
    cache_dropped: bool


def storage_speed(directory: str, size_bytes: int, budget_s: float) -> StorageSpeed:
    """Write (up to ``size_bytes``, for up to ``budget_s``) and read back a test file in
    ``directory`` (``~`` expanded; relative to the cwd, the tasks' workdir); raises OSError
    saying what failed."""
    path = os.path.abspath(os.path.expanduser(directory))
    created = _make_missing(path)
    try:
        folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            name = TEST_FILE_PREFIX + uuid.uuid4().hex
            try:
                return _measure(folder, name, size_bytes, budget_s)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=folder)
        finally:
            os.close(folder)
    finally:
        for made in reversed(created):
            with contextlib.suppress(OSError):
                os.rmdir(made)


def _make_missing(path: str) -> list[str]:
    """Create what is missing of ``path``; the directories created, outermost first."""
    missing: list[str] = []
    probe = path
    while not os.path.lexists(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    created: list[str] = []
    try:
        for made in reversed(missing):
            os.mkdir(made)
            created.append(made)
    except OSError:
        for made in reversed(created):
            with contextlib.suppress(OSError):
                os.rmdir(made)
        raise
    return created


def _drop_cache(fd: int) -> bool:
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return False
    try:
        advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        return False
    return True


def _measure(folder: int, name: str, size_bytes: int, budget_s: float) -> StorageSpeed:
    chunk = os.urandom(_CHUNK_BYTES)
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                 dir_fd=folder)
    try:
        written = 0
        started = time.monotonic()
        end = started + budget_s
        while written < size_bytes and (written == 0 or time.monotonic() < end):
            written += os.write(fd, chunk[:min(_CHUNK_BYTES, size_bytes - written)])
        os.fsync(fd)
        write_s = time.monotonic() - started
        dropped = _drop_cache(fd)
    finally:
        os.close(fd)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder)
    try:
        dropped = _drop_cache(fd) and dropped
        read = 0
        started = time.monotonic()
        while data := os.read(fd, _CHUNK_BYTES):
            read += len(data)
        read_s = time.monotonic() - started
    finally:
        os.close(fd)
    return StorageSpeed(written, write_s, read, read_s, dropped)
