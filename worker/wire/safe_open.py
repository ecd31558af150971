"""Opening files in directories others may write: a shared checkpoint directory, a run directory
(every task of the job can write it), an agent's process-table directory.

A name there can be planted by someone else: a symlink to a victim's file (opened, truncated and
written through), a hard link to one, a FIFO (``open`` blocks forever, and no signal ends it), a
device (``/dev/zero``: a read never ends). So every file tfcluster opens in such a place is opened
here, with OpenSSH's and systemd's discipline:

- relative to a descriptor of its directory (``openat``), the final component with ``O_NOFOLLOW``:
  the directory itself may be reached through symlinks the user chose, the file may not be one;
- with ``O_NONBLOCK`` (a FIFO or a device cannot block the open), then ``fstat``: anything but a
  regular file is refused, and only then is ``O_NONBLOCK`` cleared;
- to write: a file with more than one name (a hard link) is refused, and one that belongs to
  another user too; ``O_TRUNC`` is never used: :func:`truncate_ours` truncates after the checks,
  and :func:`replace_file` writes a fresh temporary file (``O_EXCL``) and renames it over the name
  (a rename replaces a planted symlink, it never writes through it).

Every refusal is an :class:`UnsafeFileError` (an ``OSError``, so a caller that handles disk errors
handles it too) whose message is one line naming the file and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO, TextIO

#: Flags every open here adds: never follow the final symlink, never block, never leak into a
#: child process, never become the controlling terminal.
_ALWAYS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_WRITING = os.O_WRONLY | os.O_RDWR
#: The kinds of a file that is not a regular one, as a refusal names them.
_KINDS = ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


class UnsafeFileError(OSError):
    """A file tfcluster will not open: not a regular file, or (to write) not only ours."""

    def __init__(self, path: str, what: str, *, writing: bool) -> None:
        self.path, self.what, self.writing = path, what, writing
        verb = "write through" if writing else "read"
        self.message = (f"{path} is {what}: tfcluster will not {verb} it; "
                        "remove it if it is not yours")
        code = errno.ELOOP if what == "a symlink" else errno.EINVAL
        super().__init__(code, self.message, path)

    def __str__(self) -> str:
        return self.message


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words ("a symlink", "a FIFO", ..., "a regular file")."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file" if
                stat.S_ISREG(mode) else "not a regular file")


def _kind_at(dir_fd: int, name: str) -> str | None:
    try:
        return kind_of(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return None


def _display(directory: str | os.PathLike[str], name: str) -> str:
    return os.path.join(os.fspath(directory), name)


def _refuse_unless_ours(info: os.stat_result, path: str, *, writing: bool) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeFileError(path, kind_of(info.st_mode), writing=writing)
    if not writing:
        return
    if info.st_nlink > 1:
        raise UnsafeFileError(path, f"a file with {info.st_nlink} names (a hard link)",
                              writing=True)
    if info.st_uid != os.geteuid():
        raise UnsafeFileError(path, f"a file of another user (uid {info.st_uid})", writing=True)


def open_dir(path: str | os.PathLike[str]) -> int:
    """A descriptor of the directory ``path`` (symlinks on the way are followed: the user chose
    the path); close it when done."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_at(dir_fd: int, name: str, flags: int, mode: int = 0o600, *,
            display: str | None = None) -> int:
    """Open ``name`` in the directory ``dir_fd`` with ``flags`` (``O_CREAT``, ``O_EXCL``,
    ``O_APPEND`` as needed; never ``O_TRUNC``) as this module's doc says: a blocking descriptor
    of a regular file, only ours to write. :class:`UnsafeFileError` when it is not; the OSError
    of ``open`` otherwise (FileNotFoundError, FileExistsError with ``O_EXCL``, ...).
    ``display``: the path named in errors (default: ``name``)."""
    if flags & os.O_TRUNC:
        raise ValueError("open_at never truncates: use truncate_ours after the checks")
    shown = display or name
    writing = bool(flags & _WRITING)
    if not flags & os.O_EXCL:  # refuse before opening a device at all
        with contextlib.suppress(FileNotFoundError):
            _refuse_unless_ours(os.stat(name, dir_fd=dir_fd, follow_symlinks=False), shown,
                                writing=writing)
    try:
        fd = os.open(name, flags | _ALWAYS, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # replaced meanwhile
            found = _kind_at(dir_fd, name)
            if found is not None and found != "a regular file":
                raise UnsafeFileError(shown, found, writing=writing) from exc
        exc.filename = exc.filename or shown
        raise
    try:
        _refuse_unless_ours(os.fstat(fd), shown, writing=writing)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
    """:func:`open_at` of ``path``'s last component in its directory."""
    directory, name = os.path.split(os.fspath(path))
    dir_fd = open_dir(directory or ".")
    try:
        return open_at(dir_fd, name, flags, mode, display=os.fspath(path))
    finally:
        os.close(dir_fd)


def open_reading(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened to read, in binary (a regular file, not through a symlink)."""
    return os.fdopen(open_file(path, os.O_RDONLY), "rb")


def open_appending(path: str | os.PathLike[str], mode: int = 0o644) -> TextIO:
    """``path`` opened to append UTF-8 text, created if missing (only a regular file of ours with
    one name, not through a symlink)."""
    return os.fdopen(open_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode), "a",
                     encoding="utf-8")


def open_appending_bytes(path: str | os.PathLike[str], mode: int = 0o644) -> BinaryIO:
    """As :func:`open_appending`, unbuffered bytes (a log that a child process writes too)."""
    return os.fdopen(open_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode), "ab",
                     buffering=0)


def create_new(path: str | os.PathLike[str], mode: int = 0o644) -> BinaryIO:
    """``path`` created (``O_EXCL``: FileExistsError if anything has that name, a symlink too)
    and opened to write, in binary."""
    return os.fdopen(open_file(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb")


def read_bytes(path: str | os.PathLike[str], limit: int) -> bytes:
    """At most ``limit`` bytes from the start of the regular file ``path``."""
    with open_reading(path) as handle:
        return handle.read(limit)


def read_text(path: str | os.PathLike[str], limit: int) -> str:
    """As :func:`read_bytes`, decoded as UTF-8 (undecodable bytes replaced)."""
    return read_bytes(path, limit).decode("utf-8", "replace")


def truncate_ours(fd: int, display: str) -> None:
    """Empty the file ``fd`` (opened by :func:`open_at` to write, so a regular file of ours with
    one name: checked again here, as this is what must never hit a stranger's file); ``display``:
    its path, for the error."""
    _refuse_unless_ours(os.fstat(fd), display, writing=True)
    os.ftruncate(fd, 0)


def replace_file(path: str | os.PathLike[str], data: bytes, mode: int = 0o600, *,
                 sync: bool = True) -> None:
    """Replace ``path`` by a file holding ``data``, atomically: a fresh temporary file beside it
    (``O_EXCL``), synced (unless not ``sync``: a file that means nothing after a reboot), renamed
    over the name. No partial file is left when it fails."""
    directory, name = os.path.split(os.fspath(path))
    dir_fd = open_dir(directory or ".")
    try:
        temporary = f".{name}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=dir_fd)  # a leftover (or a planted name): unlink only
        fd = open_at(dir_fd, temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode,
                     display=_display(directory, temporary))
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                if sync:
                    os.fsync(handle.fileno())
            os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)


def make_dirs(base: str | os.PathLike[str], *names: str, mode: int = 0o755) -> str:
    """``base/names[0]/names[1]/...`` created where missing, each level opened without following
    a symlink (``base`` itself may be reached through symlinks: the user chose it); the path.
    :class:`UnsafeFileError` when a level is a symlink or not a directory."""
    fd = open_dir(base)
    path = os.fspath(base)
    try:
        for name in names:
            path = _display(path, name)
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, mode, dir_fd=fd)
            try:
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                raise UnsafeFileError(path, kind_of(info.st_mode), writing=True) from exc
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    return path


@contextlib.contextmanager
def directory_fd(path: str | os.PathLike[str]) -> Iterator[int]:
    """:func:`open_dir` for the time of the ``with``."""
    fd = open_dir(path)
    try:
        yield fd
    finally:
        os.close(fd)


def refuse_unless_regular(path: str | os.PathLike[str], *, writing: bool) -> None:
    """:class:`UnsafeFileError` when something that is not a regular file has the name ``path``
    (a symlink, a FIFO, ...); nothing when it is a regular file or nothing is there."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeFileError(os.fspath(path), kind_of(info.st_mode), writing=writing)
