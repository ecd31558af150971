"""How the coordinator reaches the chief's checkpoint directory: file access and its lock, each
opened for the time of a ``with`` on the host the chief runs on. Each engine says which it gives
(:class:`ChiefFiles`: local only, over SFTP, or a shared file system every node sees)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from launcher.chief.checkpoints import CheckpointFS, LocalFS
from launcher.chief.flock_lock import FlockLockFile
from launcher.chief.lock import LockFile
from launcher.plan.planner import HostPlan

#: Opens file access to the host the chief runs on (None: that host's files cannot be read).
FSForHost = Callable[[HostPlan], AbstractContextManager[CheckpointFS | None]]

#: The lock of the checkpoint directory ``directory`` on the chief's host (None: it cannot be
#: locked there; the run goes on and says so).
LockForHost = Callable[[HostPlan, str], AbstractContextManager[LockFile | None]]


def local_fs_only(host: HostPlan) -> AbstractContextManager[CheckpointFS | None]:
    return contextlib.nullcontext(LocalFS() if host.local else None)


def local_lock_only(host: HostPlan, directory: str) -> AbstractContextManager[LockFile | None]:
    """``flock`` for a local chief's directory; a remote one needs the composition root to pass
    :func:`launcher.chief.remote_lock.sftp_lock_file` over that host's SFTP."""
    return contextlib.nullcontext(FlockLockFile(directory) if host.local else None)


def shared_fs(_host: HostPlan) -> AbstractContextManager[CheckpointFS | None]:
    """Every host sees the chief's checkpoint directory at the same path as this machine."""
    return contextlib.nullcontext(LocalFS())


def shared_lock(_host: HostPlan, directory: str) -> AbstractContextManager[LockFile | None]:
    return contextlib.nullcontext(FlockLockFile(directory))


@dataclass(frozen=True)
class ChiefFiles:
    """File access to the chief's host and the lock of its checkpoint directory."""

    fs: FSForHost = local_fs_only
    lock: LockForHost = local_lock_only


#: This machine's files only: a remote chief's cannot be read or locked.
LOCAL_ONLY = ChiefFiles()
#: A file system every host shares at the same paths (a cluster's, pre-flight checks it).
SHARED = ChiefFiles(shared_fs, shared_lock)
