"""How the coordinator reaches the chief's checkpoint directory: file access and its lock, each
opened for the time of a ``with`` on the host the chief runs on. The composition root chooses them
(local only, over SFTP, or a Slurm allocation's shared file system)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

from launcher.job.checkpoint_lock import LockFile
from launcher.job.checkpoints import CheckpointFS, LocalFS
from launcher.job.flock_lock import FlockLockFile
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
    :func:`launcher.job.remote_lock.sftp_lock_file` over that host's SFTP."""
    return contextlib.nullcontext(FlockLockFile(directory) if host.local else None)
