"""Rules that span task groups and hosts (one chief, known hosts, ports on remote hosts, no port
used twice), checked on whatever groups are valid so that every problem shows at once."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from launcher.spec.errors import SpecProblem
from launcher.spec.limits import MAX_ARG_BYTES, MAX_TASKS, TASK_LIMIT_REASON
from worker.wire.tfconfig import CHIEF, EVALUATOR, TASK_TYPES, WORKER, TaskId


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
    next_index = dict.fromkeys(TASK_TYPES, 0)
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
    task ids (which depend on every group) are not named. Counts are summed before any group is
    expanded, so a job with too many tasks is refused at once.
    """
    problems: list[SpecProblem] = []
    total = sum(group.count for _, group in groups)
    if total > MAX_TASKS:
        problems.append(SpecProblem("tasks", f"{total} tasks in all: {TASK_LIMIT_REASON}"))
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
    if total <= MAX_TASKS:
        problems.extend(_port_clashes(groups, hosts, complete=complete))
        size = tf_config_size(groups, hosts)
        if size > MAX_ARG_BYTES:
            problems.append(SpecProblem(
                "tasks", f"TF_CONFIG, which lists every task's address, would be about {size} "
                f"bytes, more than the {MAX_ARG_BYTES} one environment variable may hold on Linux: "
                "use fewer tasks or shorter host addresses"))
    return problems


#: TF_CONFIG's JSON around the addresses (keys, the task part) and the ``TF_CONFIG=`` of the entry.
_TF_CONFIG_OVERHEAD = 160
#: Local tasks appear as ``localhost`` in an all-local job, else as this machine's address on the
#: route to the remote hosts: at most a bracketed IPv6 address.
_LOCAL_ONLY_ADDRESS = len("localhost")
_LONGEST_LOCAL_ADDRESS = len("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]")
#: ``:65535``, and each address's quotes and comma in the JSON list.
_PER_ADDRESS = len(":65535") + 3


def tf_config_size(groups: Sequence[tuple[int, TaskGroupSpec]],
                   hosts: Mapping[str, HostSpec | None]) -> int:
    """How long, at most, each task's TF_CONFIG will be in bytes (without expanding the groups)."""
    mixed = any(not is_local(group.host, hosts) for _, group in groups)
    size = _TF_CONFIG_OVERHEAD
    for _, group in groups:
        if group.type == EVALUATOR:  # not in the cluster: it serves nothing
            continue
        if is_local(group.host, hosts):
            address = _LONGEST_LOCAL_ADDRESS if mixed else _LOCAL_ONLY_ADDRESS
        else:
            declared = hosts.get(group.host)
            name = declared.address if declared and declared.address else group.host
            address = len(name.encode("utf-8")) + (2 if ":" in name else 0)  # [IPv6]
        size += group.count * (address + _PER_ADDRESS)
    return size


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
