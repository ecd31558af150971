"""How ``make test`` spreads the tests over pytest-xdist's workers.

xdist's ``loadgroup`` runs each group of :data:`tests.conftest._SERIAL_GROUPS` (Slurm, network
namespaces, sshd, the two real-TensorFlow groups) on one worker, in order, and every test of no
group wherever a worker is free. It orders its work by size, so the groups go first and the
tests of no group last. With as many workers as cores, the groups kept both cores busy, but the
last third of the run (the tests of no group: coordinators, agents and fake trainers that mostly
wait for their heartbeats, steps and deadlines) kept them half idle.

:class:`SerialGroupsScheduling` starts more workers than there are groups to run at once: at
most :data:`GROUP_WORKERS` of them run a group at any time (two real-TensorFlow jobs at most, one
per core, as before), the longest groups first (:data:`GROUP_ORDER`), and the others run the
tests of no group from the start, beside them. A worker that finishes its group takes whatever
is left; once enough workers run a group, a free one takes only tests of no group, and one with
nothing it may take waits until the others finish tests.
"""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling
from xdist.workermanage import WorkerController

#: How many workers may run a serial group at the same time.
GROUP_WORKERS = 2
#: The serial groups, longest first (worker time in a ``.ci/run`` here: tensorflow-1 820 s,
#: netns 680 s with the Docker tier, tensorflow-2 210 s, slurm 200 s, ssh 80 s), so that the two
#: longest start at once and the short ones fill in after them: the two workers' chains of groups
#: end close together (in their order by size, ssh then tensorflow-1 on one worker and netns,
#: slurm, tensorflow-2 on the other, the second chain ran 200 s longer). Others come after these.
GROUP_ORDER = ("tensorflow-1", "netns", "tensorflow-2", "slurm", "ssh")

#: A work unit: the ids of its tests, and whether each one has finished.
WorkUnit = dict[str, bool]


def is_group(scope: str) -> bool:
    """Whether a work unit of ``loadgroup`` is a serial group (its name) rather than a single
    test (its node id, ``path::name``)."""
    return "::" not in scope


class SerialGroupsScheduling(LoadGroupScheduling):
    """``loadgroup`` with at most :data:`GROUP_WORKERS` workers in a serial group at once."""

    def _assign_work_unit(self, node: WorkerController) -> None:
        scope = self._next_scope(node)
        if scope is None:  # only groups are left, and enough workers run one
            return
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(test) for test, done in work_unit.items()
                                if not done])

    def _next_scope(self, node: WorkerController) -> str | None:
        """The work unit ``node`` takes next: the first group of :data:`GROUP_ORDER` still
        queued if it may take a group, else the first test of no group."""
        in_groups = sum(1 for other, units in self.assigned_work.items()
                        if other is not node and _runs_group(units))
        groups = [scope for scope in self.workqueue if is_group(scope)]
        if groups and in_groups < GROUP_WORKERS:
            return min(groups, key=_rank)
        return next((scope for scope in self.workqueue if not is_group(scope)), None)

    def mark_test_complete(self, node: WorkerController, item_index: int,
                           duration: float = 0) -> None:
        super().mark_test_complete(node, item_index, duration)
        for other in self.nodes:  # a worker left waiting may take what this test freed
            if other is not node and not other.shutting_down \
                    and self._pending_of(self.assigned_work.get(other, {})) == 0:
                self._reschedule(other)


def _runs_group(units: dict[str, WorkUnit]) -> bool:
    return any(is_group(scope) and not all(unit.values()) for scope, unit in units.items())


def _rank(group: str) -> int:
    return GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER)
