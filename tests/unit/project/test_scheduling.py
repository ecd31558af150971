"""``make test``'s scheduler, driven the way xdist drives it (nodes added, their collections
registered, ``schedule``, then a test completed at a time): at most two workers in a serial
group at once, the others on the tests of no group from the start, every test run once, and
every worker shut down at the end; the sshd tests' group beside two others."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from tests.support.scheduling import GROUP_WORKERS, SerialGroupsScheduling, is_counted

#: The largest first (xdist queues by size): ssh, a group of SIDE_GROUPS, is the first taken.
GROUPS = {"ssh": 5, "slurm": 3, "netns": 3, "tensorflow-1": 3, "tensorflow-2": 3}
COLLECTION = [f"tests/{group}/test_x.py::test_{i}@{group}"
              for group, count in GROUPS.items() for i in range(count)] \
    + [f"tests/unit/test_y.py::test_{i}" for i in range(12)]


@dataclass(eq=False)
class Node:
    """What the scheduler uses of xdist's WorkerController."""

    name: str
    sent: list[int] = field(default_factory=list)
    gateway: Any = None
    shutting_down: bool = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


@dataclass
class Config:
    """What the scheduler reads of pytest's config: ``-n N`` and ``--loadscope-reorder``."""

    workers: int
    option: Any = field(default_factory=lambda: type("Option", (), {"loadscopereorder": True}))

    def getvalue(self, name: str) -> list[str]:
        assert name == "tx"
        return [f"{self.workers}*popen"]


def scheduled(workers: int) -> tuple[SerialGroupsScheduling, list[Node]]:
    scheduler = SerialGroupsScheduling(cast(Any, Config(workers)))
    nodes = [Node(f"gw{i}") for i in range(workers)]
    for node in nodes:
        node.gateway = type("Gateway", (), {"id": node.name})
    for node in nodes:
        scheduler.add_node(cast(Any, node))
    for node in nodes:
        scheduler.add_node_collection(cast(Any, node), COLLECTION)
    scheduler.schedule()
    return scheduler, nodes


def in_group(node: Node, done: set[int], group: Callable[[str], bool] = is_counted) -> bool:
    """Whether ``node`` has tests of a counted group (or of those ``group`` says) still to run."""
    return any(group(COLLECTION[i].split("@")[-1]) for i in node.sent if i not in done)


def in_ssh(scope: str) -> bool:
    return scope == "ssh"


def run_all(scheduler: SerialGroupsScheduling, nodes: list[Node],
            pick: Callable[[list[Node]], Node]) -> tuple[list[int], int]:
    """Complete the tests one at a time, each on a node chosen by ``pick`` among those with
    tests to run; the order they ran in, and the most nodes seen in a group at once."""
    done: set[int] = set()
    ran: list[int] = []
    most = 0
    for _ in range(len(COLLECTION) + 1):
        most = max(most, sum(in_group(node, done) for node in nodes))
        busy = [node for node in nodes if any(i not in done for i in node.sent)]
        if not busy:
            break
        node = pick(busy)
        index = next(i for i in node.sent if i not in done)
        done.add(index)
        ran.append(index)
        scheduler.mark_test_complete(cast(Any, node), index)
    return ran, most


def rotating(turns: Iterator[int]) -> Callable[[list[Node]], Node]:
    """A pick that goes round the busy nodes (a different one each time)."""
    return lambda busy: busy[next(turns) % len(busy)]


def test_two_workers_take_groups_the_sshd_tests_a_third_and_the_others_no_group() -> None:
    _, nodes = scheduled(4)
    grouped = [node for node in nodes if in_group(node, set())]
    assert len(grouped) == GROUP_WORKERS
    for node in grouped:  # one group each, whole
        assert len({COLLECTION[i].split("@")[1] for i in node.sent}) == 1
    ssh = [node for node in nodes if in_group(node, set(), in_ssh)]
    assert len(ssh) == 1 and ssh[0] not in grouped
    for node in nodes:
        if node not in grouped:
            assert node.sent and not in_group(node, set())


def test_every_test_runs_once_never_more_than_two_groups_at_once_and_all_workers_stop() -> None:
    for workers, rotation in itertools.product((2, 3, 4), range(3)):
        scheduler, nodes = scheduled(workers)
        ran, most = run_all(scheduler, nodes, rotating(itertools.count(rotation)))
        assert sorted(ran) == list(range(len(COLLECTION))), (workers, rotation)
        assert most <= GROUP_WORKERS
        for group in GROUPS:  # a group's tests all ran on one worker, in order
            holders = [n for n in nodes if any(COLLECTION[i].endswith("@" + group)
                                               for i in n.sent)]
            assert len(holders) == 1
        assert all(node.shutting_down for node in nodes)
        assert scheduler.tests_finished


def test_a_worker_left_with_only_groups_waits_until_a_group_ends() -> None:
    scheduler, nodes = scheduled(3)
    light = next(n for n in nodes if not in_group(n, set()))
    assert in_group(light, set(), in_ssh)  # the sshd tests first, beside two groups
    ran, _ = run_all(scheduler, [light], lambda busy: busy[0])  # the groups' workers run nothing
    assert len(ran) == 5 + 12 and not in_group(light, set())
    assert scheduler.workqueue and not light.shutting_down  # two groups are left: it waits
    first = next(n for n in nodes if n is not light)
    finished = list(first.sent)
    for index in finished:
        scheduler.mark_test_complete(cast(Any, first), index)
    done = {*ran, *finished}
    assert sum(in_group(node, done) for node in nodes) == GROUP_WORKERS
    assert scheduler.workqueue and not light.shutting_down  # the group that ended was replaced
