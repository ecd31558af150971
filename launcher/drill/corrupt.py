"""``corrupt-checkpoint:latest``: truncate the data of the chief's latest complete checkpoint.

The injector kills the chief first and truncates once the chief's exit is reported (its process
is gone), so the chief cannot save a newer checkpoint in between for the restart to resume from.
Discovery (:func:`launcher.chief.checkpoints.latest_checkpoint`) rejects a checkpoint with an empty
data shard, so the restart that follows must resume from the previous complete checkpoint (or from
scratch when there is none). Only a chief whose checkpoint directory is on this machine can be
corrupted (for a remote chief the fault is never injected, and the drill fails saying so); the
report names the checkpoint truncated.
"""

from __future__ import annotations

import os
import posixpath

from launcher.chief.checkpoints import latest_checkpoint
from worker.wire.safe_open import open_at, open_dir, truncate_ours


def has_complete(directory: str | None) -> bool:
    """Whether ``directory`` (a local path) holds a complete checkpoint to corrupt."""
    return directory is not None and latest_checkpoint(directory).checkpoint is not None


def corrupt_latest(directory: str | None) -> str | None:
    """Truncate every data shard of the latest complete checkpoint in ``directory`` (a local
    path) to zero bytes; the checkpoint's prefix, or None when there is no complete one."""
    if directory is None:
        return None
    found = latest_checkpoint(directory).checkpoint
    if found is None:
        return None
    folder, base = posixpath.split(found.prefix)
    try:
        dir_fd = open_dir(folder)
        try:
            for name in os.listdir(dir_fd):
                if name.startswith(base + ".data-"):
                    _truncate(dir_fd, name, posixpath.join(folder, name))
        finally:
            os.close(dir_fd)
    except OSError:  # not writable here (or not a file of ours): the fault is not injected
        return None
    return found.prefix


def _truncate(dir_fd: int, name: str, shown: str) -> None:
    """Empty the shard ``name``: never through a symlink, never a file that is not ours."""
    fd = open_at(dir_fd, name, os.O_WRONLY, display=shown)
    try:
        truncate_ours(fd, shown)
    finally:
        os.close(fd)
