"""How ``make test`` spreads the tests over pytest-xdist's workers.

xdist's ``loadgroup`` runs each group of :data:`tests.conftest._SERIAL_GROUPS` (Slurm, network
namespaces, sshd, the two real-TensorFlow groups) on one worker, in order, and every test of no
group wherever a worker is free. It orders its work by size, so the groups go first and the
tests of no group last. With as many workers as cores, the groups kept both cores 85-98 % busy,
but the last minutes of the run (the tests of no group: coordinators, agents and fake trainers
that mostly wait for their heartbeats, steps and deadlines) kept them half idle.

:class:`SerialGroupsScheduling` starts more workers than there are groups to run at once: at
most :data:`GROUP_WORKERS` of them run a group at any time (two real-TensorFlow jobs at most, one
per core, as before), and the others run the tests of no group from the start, beside them. A
worker that finishes its group takes whatever is left; once every group has a worker, a free one
takes only tests of no group, and one with nothing it may take waits until the others finish
tests. The groups of :data:`SIDE_GROUPS` share a fixture, not the CPU: they run beside the others
and are not counted.
"""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling
from xdist.workermanage import WorkerController

#: How many workers may run a serial group at the same time.
GROUP_WORKERS = 2
#: Groups that are serial for a fixture they share (one sshd), not for the CPU (no TensorFlow,
#: no Docker, no Slurm): they run beside the others and are not counted in GROUP_WORKERS. So the
#: sshd tests (80 s) no longer hold one of the two group workers at the start.
SIDE_GROUPS = frozenset({"ssh"})

#: A work unit: the ids of its tests, and whether each one has finished.
WorkUnit = dict[str, bool]


def is_group(scope: str) -> bool:
    """Whether a work unit of ``loadgroup`` is a serial group (its name) rather than a single
    test (its node id, ``path::name``)."""
    return "::" not in scope


def is_counted(scope: str) -> bool:
    """Whether a work unit is a group that counts in :data:`GROUP_WORKERS`."""
    return is_group(scope) and scope not in SIDE_GROUPS


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
        """The first work unit in the queue that ``node`` may take."""
        in_groups = sum(1 for other, units in self.assigned_work.items()
                        if other is not node and _runs_group(units))
        return next((scope for scope in self.workqueue
                     if not is_counted(scope) or in_groups < GROUP_WORKERS), None)

    def mark_test_complete(self, node: WorkerController, item_index: int,
                           duration: float = 0) -> None:
        super().mark_test_complete(node, item_index, duration)
        for other in self.nodes:  # a worker left waiting may take what this test freed
            if other is not node and not other.shutting_down \
                    and self._pending_of(self.assigned_work.get(other, {})) == 0:
                self._reschedule(other)


def _runs_group(units: dict[str, WorkUnit]) -> bool:
    return any(is_counted(scope) and not all(unit.values()) for scope, unit in units.items())
