"""What the doctor's program says of its host: the memory its tasks could still use and the CPUs
they may run on (the affinity mask that a task started here inherits, as ``taskset`` or a
scheduler's cgroup set it: fewer than the machine has is worth knowing)."""

from __future__ import annotations

import os
import socket
from typing import Any

import psutil

from worker.agent.host_memory import available_bytes


def host_facts() -> dict[str, Any]:
    """The ``facts`` answer (see :mod:`worker.wire.doctor`)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on every OS
        cpus = os.cpu_count() or 0
    try:
        load1: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):
        load1 = None
    return {"memory_available": available_bytes(),
            "memory_total": int(psutil.virtual_memory().total),
            "cpus": cpus, "cpu_count": os.cpu_count() or 0, "load1": load1,
            "hostname": socket.gethostname()}
