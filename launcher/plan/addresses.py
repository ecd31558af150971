"""How tasks on this machine are addressed in TF_CONFIG: ``localhost`` for an all-local job, else
this machine's address on the route to the remote hosts (so they can reach it)."""

from __future__ import annotations

from launcher.netaddr import address_towards
from launcher.spec.model import ClusterSpec

LOCALHOST = "localhost"


def local_task_address(spec: ClusterSpec) -> str:
    """How remote tasks reach the tasks on this machine: ``localhost`` for an all-local job,
    else the local address on the route to the first remote host."""
    remote = [name for name in spec.hosts if not spec.is_local(name)]
    if not remote:
        return LOCALHOST
    return address_towards(spec.address_of(remote[0])) or LOCALHOST
