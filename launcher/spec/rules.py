"""Rules that span task groups and hosts (one chief, known hosts, ports on remote hosts, no port
used twice), checked on whatever groups are valid so that every problem shows at once."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from launcher.spec.errors import SpecProblem
from worker.tfconfig import CHIEF, EVALUATOR, WORKER, TaskId


class TaskGroupSpec(Protocol):
    """A ``tasks:`` entry as these rules read it (the model's ``TaskGroupSpec`` is one)."""

    @property
    def type(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def count(self) -> int: ...
    @property
    def port(self) -> int | None: ...


class HostSpec(Protocol):
    """A ``hosts:`` entry as these rules read it."""

    @property
    def address(self) -> str | None: ...

#: Host names that mean "this machine" unless they are declared under ``hosts``.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class TaskSlot:
    """One task of the job after counts are expanded; ``port`` None means allocated at run time."""

    task: TaskId
    host: str
    port: int | None


def is_local(host: str, declared: Collection[str]) -> bool:
    return host not in declared and host.lower() in LOCAL_HOSTS


def expand(groups: Sequence[tuple[int, TaskGroupSpec]]) -> Iterator[tuple[int, TaskSlot]]:
    next_index = dict.fromkeys((CHIEF, WORKER, EVALUATOR), 0)
    for position, group in groups:
        for offset in range(group.count):
            task = TaskId(group.type, next_index[group.type])
            next_index[group.type] += 1
            port = None if group.port is None else group.port + offset
            yield position, TaskSlot(task, group.host, port)


SINGLETON_LIMITS = {
    CHIEF: "a job has at most one chief",
    EVALUATOR: "a job has at most one evaluator (TensorFlow supports one)",
}


def cluster_problems(
    groups: Sequence[tuple[int, TaskGroupSpec]],
    hosts: Mapping[str, HostSpec | None],
    *,
    complete: bool,
) -> list[SpecProblem]:
    """Rules that span task groups and hosts.

    ``groups`` are the valid task groups with their positions in ``tasks``; ``hosts`` maps every
    declared host name to its entry (None if the entry itself is invalid). When ``complete`` is
    False some groups were invalid and left out, so rules that need every group are skipped and
    task ids (which depend on every group) are not named.
    """
    problems: list[SpecProblem] = []
    first_of_type: dict[str, int] = {}
    for position, group in groups:
        where = f"tasks[{position}]"
        if group.type in SINGLETON_LIMITS and group.type in first_of_type:
            first = first_of_type[group.type]
            problems.append(
                SpecProblem(
                    f"{where}.type",
                    f"{SINGLETON_LIMITS[group.type]}; tasks[{first}] is already the {group.type}",
                )
            )
        first_of_type.setdefault(group.type, position)
        if is_local(group.host, hosts):
            continue
        if group.host not in hosts:
            problems.append(
                SpecProblem(
                    f"{where}.host",
                    f"unknown host {group.host!r}: declare it under hosts (only "
                    f"{', '.join(LOCAL_HOSTS)} need no entry)",
                )
            )
        elif group.port is None:
            problems.append(
                SpecProblem(
                    f"{where}.port",
                    f"port required for remote host {group.host!r} (ports are allocated at run "
                    "time only on local hosts)",
                )
            )
    if complete and not ({CHIEF, WORKER} & first_of_type.keys()):
        problems.append(SpecProblem("tasks", "needs at least one chief or worker task"))
    problems.extend(_port_clashes(groups, hosts, complete=complete))
    return problems


def _port_clashes(
    groups: Sequence[tuple[int, TaskGroupSpec]],
    hosts: Mapping[str, HostSpec | None],
    *,
    complete: bool,
) -> list[SpecProblem]:
    """One problem per pair of groups that would listen on the same host and port."""

    def machine(host: str) -> str:
        # Local names are all one machine, and so are host entries with the same address.
        declared = hosts.get(host)
        address = (declared.address if declared and declared.address else host).lower()
        return "<local>" if address in LOCAL_HOSTS else address

    owners: dict[tuple[str, int], tuple[int, TaskSlot]] = {}
    reported: set[tuple[int, int]] = set()
    problems: list[SpecProblem] = []
    for position, slot in expand(groups):
        if slot.port is None:
            continue
        key = (machine(slot.host), slot.port)
        if key not in owners:
            owners[key] = (position, slot)
            continue
        other_position, other = owners[key]
        if (position, other_position) in reported:
            continue
        reported.add((position, other_position))
        whose = f"tasks[{other_position}]" + (f" ({other.task})" if complete else "")
        problems.append(
            SpecProblem(
                f"tasks[{position}].port",
                f"{slot.host}:{slot.port} is already used by {whose}",
            )
        )
    return problems
