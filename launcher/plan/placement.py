"""Where each task runs in one attempt: which host, reached at which address, on which port.

An engine (:mod:`launcher.backends`) makes a :class:`Placement` for every attempt: the local and SSH
engines from the hosts the spec's tasks name (:func:`named_placement`), a scheduler's engine from
the nodes of its allocation that are still usable. The planner turns a placement into a
:class:`~launcher.plan.planner.LaunchPlan` without knowing which engine made it. A placement is
plain data: printable, comparable, and recorded with each attempt.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from launcher.spec.model import ClusterSpec
from worker.wire.tfconfig import EVALUATOR, TaskId

#: Interpreter used on remote hosts when the spec does not name one.
REMOTE_PYTHON = "python3"
LOCAL_ADDRESS = "localhost"
SSH_PORT = 22


class PastAttempt(Protocol):
    """An attempt that ran, as an engine placing the next one sees it."""

    @property
    def attempt(self) -> int: ...
    @property
    def lost_hosts(self) -> frozenset[str]:
        """Hosts whose agent (connection, job step) was lost during the attempt."""
        ...


class PlacementError(ValueError):
    """A placement that contradicts itself (a task on a host it does not list)."""


@dataclass(frozen=True)
class PlacedHost:
    """One agent's host in an attempt."""

    name: str
    #: Where the host's tasks are reached (their TF_CONFIG addresses).
    address: str
    #: This machine: the agent is a local subprocess and its process table lives in the run dir.
    local: bool
    #: The interpreter that runs the agent and the Python tasks there.
    python: str
    #: Relative paths (workdir, checkpoint dir) are resolved against the base directory: the host
    #: is this machine or shares its file system at the same paths.
    resolves_paths: bool
    #: How the host is reached, as ``tfcluster plan`` says it ("local", "ssh user@addr:22").
    where: str


@dataclass(frozen=True)
class PlacedTask:
    task: TaskId
    host: str
    #: The port the placement fixes; None: chosen free at run time (local tasks) or none served.
    port: int | None


@dataclass(frozen=True)
class Placement:
    """Every task of one attempt on its host (tasks in the spec's order)."""

    hosts: tuple[PlacedHost, ...]
    tasks: tuple[PlacedTask, ...]

    def __post_init__(self) -> None:
        names = {host.name for host in self.hosts}
        for placed in self.tasks:
            if placed.host not in names:
                raise PlacementError(f"task {placed.task} is placed on {placed.host!r}, which "
                                     "the placement does not list")

    def host(self, name: str) -> PlacedHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    @property
    def ports_to_allocate(self) -> list[TaskId]:
        """Tasks whose port tfcluster must choose (the placement fixes none, and they serve)."""
        return [t.task for t in self.tasks if t.port is None and needs_port(t.task)]


def needs_port(task: TaskId) -> bool:
    return task.type != EVALUATOR


def absolute(path: str, base_dir: str) -> str:
    """``path`` (``~`` expanded) made absolute against ``base_dir``."""
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(path)))


def named_placement(spec: ClusterSpec, *, local_python: str,
                    local_address: str = LOCAL_ADDRESS) -> Placement:
    """The placement of a spec whose tasks name their hosts: each task where the spec puts it,
    on the port it gives (or one chosen at run time); this machine's tasks at ``local_address``
    and run by ``local_python`` unless the spec names an interpreter."""
    slots = spec.task_slots()
    hosts: dict[str, PlacedHost] = {}
    for slot in slots:
        if slot.host not in hosts:
            hosts[slot.host] = named_host(spec, slot.host, local_python, local_address)
    return Placement(hosts=tuple(hosts.values()),
                     tasks=tuple(PlacedTask(s.task, s.host, s.port) for s in slots))


def listed_pool(spec: ClusterSpec, *, local_python: str,
                local_address: str = LOCAL_ADDRESS) -> tuple[PlacedHost, ...]:
    """The hosts of ``placement.hosts``, in order, as :func:`named_placement` places them."""
    pool = spec.pool
    names = pool.hosts if pool is not None and pool.hosts is not None else ()
    return tuple(named_host(spec, name, local_python, local_address) for name in names)


def named_host(spec: ClusterSpec, name: str, local_python: str,
               local_address: str) -> PlacedHost:
    """Host ``name`` of ``spec``: this machine's, or one reached over SSH."""
    if spec.is_local(name):
        return PlacedHost(name=name, address=local_address, local=True,
                          python=spec.python or local_python, resolves_paths=True, where="local")
    declared = spec.hosts.get(name)
    address = spec.address_of(name)
    user = f"{declared.user}@" if declared is not None and declared.user else ""
    port = declared.port if declared is not None else SSH_PORT
    return PlacedHost(name=name, address=address, local=False,
                      python=spec.python or REMOTE_PYTHON, resolves_paths=False,
                      where=f"ssh {user}{address}:{port}")
