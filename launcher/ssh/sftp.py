"""The chief's checkpoint directory on a remote host, read (and cleaned) over SFTP: the
:class:`~launcher.chief.checkpoints.CheckpointFS` of a remote chief."""

from __future__ import annotations

import contextlib
import posixpath
import stat
from collections.abc import Iterator
from typing import TYPE_CHECKING

from worker.wire.safe_open import UnsafeFileError, kind_of

if TYPE_CHECKING:
    import paramiko

    from launcher.ssh.config import SshHost
    from launcher.ssh.connector import SshConnector


#: Most bytes of a remote checkpoint state file that are read.
MAX_READ_BYTES = 16 * 1024 * 1024


class SftpFS:
    def __init__(self, sftp: paramiko.SFTPClient) -> None:
        self.sftp = sftp

    def read_text(self, path: str) -> str | None:
        """The file's text; UnsafeFileError when its name is not a regular file (SFTP has no
        ``O_NOFOLLOW`` / ``O_NONBLOCK``: ``lstat`` first, so that a symlink is not read through
        and a FIFO does not block the server's open forever)."""
        try:
            mode = self.sftp.lstat(path).st_mode or 0
            if not stat.S_ISREG(mode):
                raise UnsafeFileError(path, kind_of(mode), writing=False)
            with self.sftp.open(path, "rb") as handle:
                return bytes(handle.read(MAX_READ_BYTES)).decode("utf-8", "replace")
        except UnsafeFileError:
            raise
        except OSError:
            return None

    def listdir(self, path: str) -> list[str] | None:
        try:
            return list(self.sftp.listdir(path))
        except OSError:
            return None

    def size(self, path: str) -> int | None:
        try:
            return self.sftp.stat(path).st_size
        except OSError:
            return None

    def is_dir(self, path: str) -> bool:
        try:
            return stat.S_ISDIR(self.sftp.stat(path).st_mode or 0)
        except OSError:
            return False

    def remove_tree(self, path: str) -> None:
        with contextlib.suppress(OSError):
            for entry in self.sftp.listdir_attr(path):
                child = posixpath.join(path, entry.filename)
                if stat.S_ISDIR(entry.st_mode or 0):
                    self.remove_tree(child)
                else:
                    with contextlib.suppress(OSError):
                        self.sftp.remove(child)
            self.sftp.rmdir(path)


@contextlib.contextmanager
def remote_checkpoint_fs(connector: SshConnector, host: SshHost) -> Iterator[SftpFS | None]:
    """An SFTP view of ``host``'s files for the time of the ``with``; None when the host cannot
    be reached (the caller then restarts without a resume point and says why)."""
    from launcher.errors import AgentStartError

    try:
        connection = connector.connect(connector.target(host))
    except (AgentStartError, OSError):
        yield None
        return
    try:
        sftp = connection.transport.open_sftp_client()
        if sftp is None:
            yield None
            return
        try:
            yield SftpFS(sftp)
        finally:
            sftp.close()
    finally:
        connection.close()
