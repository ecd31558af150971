"""Which hosts of a plan the doctor measures, and at which address and ports their peers reach
them: the address of the host's tasks in TF_CONFIG (what TensorFlow's gRPC connects to, not the
SSH address, which may differ) and the tasks' own ports, free before a run, so a firewall that
lets only those through is measured too. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.plan.planner import HostPlan, LaunchPlan


@dataclass(frozen=True)
class Target:
    plan: HostPlan
    #: Where its peers connect to it (its tasks' TF_CONFIG address).
    address: str
    #: Its tasks' ports, to serve its peers on (0s left out: allocated at run time).
    ports: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.plan.name


def split_address(text: str) -> str:
    """The host part of ``host:port`` (``[v6]:port`` too)."""
    if text.startswith("["):
        return text[1:text.index("]")]
    return text.rpartition(":")[0] or text


def targets(launch_plan: LaunchPlan) -> list[Target]:
    """Every host of ``launch_plan`` with its peers' address and its tasks' ports."""
    found = []
    for host in launch_plan.hosts:
        address = host.address
        for task in host.tasks:
            members = task.tf_config.cluster.get(task.task.type, ())
            if task.port is not None and task.task.index < len(members):
                address = split_address(members[task.task.index])
                break
        ports = tuple(t.port for t in host.tasks if t.port)
        found.append(Target(host, address, ports))
    return found


def has_links(found: list[Target]) -> bool:
    """Whether there is any link between two machines: not when every host is this one."""
    return len(found) > 1 and not all(t.plan.local for t in found)


def linked(a: Target, b: Target) -> bool:
    """Whether the link between ``a`` and ``b`` is one between two machines."""
    return not (a.plan.local and b.plan.local)
