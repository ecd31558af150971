"""How much memory this host still has for its tasks, for the agent's heartbeat.

psutil's ``available`` (what can be given to processes without swapping), or less when the agent
runs in a cgroup (v2) whose ``memory.max`` is closer: a container's limit is what the OOM killer
enforces there. The coordinator compares each task's RSS with it (``launcher.job.memory``).
"""

from __future__ import annotations

from pathlib import Path

import psutil

from worker.wire.protocol import Heartbeat, TaskUsage

_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _cgroup_left() -> int | None:
    """``memory.max - memory.current`` of this process's cgroup (v2), if it has a limit."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        unified = next(line for line in lines if line.startswith("0::"))
        directory = _CGROUP_ROOT / unified[3:].lstrip("/")
        limit = (directory / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((directory / "memory.current").read_text()))
    except (OSError, StopIteration, ValueError):
        return None


def available_bytes() -> int | None:
    try:
        available = int(psutil.virtual_memory().available)
    except (OSError, psutil.Error):
        return _cgroup_left()
    left = _cgroup_left()
    return available if left is None else min(available, left)


def heartbeat(ts: float, tasks: dict[str, TaskUsage], spares_rss_bytes: int) -> Heartbeat:
    """The agent's heartbeat: each task's CPU and RSS, and what the host has left."""
    return Heartbeat(ts=ts, tasks=tasks, spares_rss_bytes=spares_rss_bytes,
                     available_bytes=available_bytes())
