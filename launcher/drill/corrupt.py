"""``corrupt-checkpoint:latest``: truncate the data of the chief's latest complete checkpoint.

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
        for name in os.listdir(folder):
            if name.startswith(base + ".data-"):
                os.truncate(os.path.join(folder, name), 0)
    except OSError:  # not writable here: the fault is not injected (and the drill says so)
        return None
    return found.prefix
