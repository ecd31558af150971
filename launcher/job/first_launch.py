"""The first attempt's launch, sent before the job machinery is imported.

A run whose every task is on this machine can start its tasks as soon as the spec is valid and
what they need is held: the run directory (checked and created), their ports, and the lock of the
chief's checkpoint directory. Everything else the coordinator has (the job loop, health, failures,
the console and status board: 60-80 ms here from the first launch until the coordinator runs) is
needed only once the tasks run. So ``tfcluster run`` and ``local`` call :func:`launch_first` right
after validating the spec: it does
what :meth:`~launcher.job.coordinator.Coordinator.run` would do before the first launch, plans
attempt 0 and hands its launch to the agent that was started early
(:mod:`launcher.backends.early_agent`). The coordinator then takes the :class:`FirstLaunch` over
(the ports, the lock, the run directory) instead of doing it again; it plans attempt 0 again, which
gives the same launch (planning is pure), and the local backend checks that it is the one the agent
already has.

Nothing starts unless everything before it succeeded: a run directory in use, a checkpoint
directory another run holds, or no free ports raise here, as they would in the coordinator, with
nothing started and everything taken so far let go. This module imports only what those steps
need (``tests/unit/test_layers.py`` keeps the job loop out of it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from launcher.backends.early_agent import EarlyAgent
from launcher.job.checkpoint_lock import HolderRecord, held
from launcher.job.flock_lock import FlockLockFile
from launcher.output.rundir import RunDir
from launcher.plan.planner import Planner
from launcher.plan.ports import PortAllocator
from worker.tfconfig import TaskId

if TYPE_CHECKING:
    from launcher.spec.model import ClusterSpec


@dataclass
class Warnings:
    """Lines to tell the user, kept until the console exists, then passed straight on."""

    kept: list[str] = field(default_factory=list)
    _say: Callable[[str], None] | None = None

    def __call__(self, text: str) -> None:
        if self._say is None:
            self.kept.append(text)
        else:
            self._say(text)

    def to(self, say: Callable[[str], None]) -> None:
        """From now on say every line with ``say``, starting with those kept."""
        self._say = say
        for text in self.kept:
            say(text)
        self.kept.clear()


@dataclass
class FirstLaunch:
    """What :func:`launch_first` holds for the coordinator, which owns it from then on: the run
    directory (created), the planner, the ports of attempt 0 and their allocator (closed when the
    job ends), the checkpoint directory's lock (``held``, closed when the job ends) and the
    warnings said before the console existed."""

    run_dir: RunDir
    planner: Planner
    ports: dict[TaskId, int]
    allocator: PortAllocator
    held: contextlib.ExitStack
    warnings: Warnings


def can_launch_first(spec: ClusterSpec) -> bool:
    """Whether ``spec``'s first launch can go out early: every task on one host, this machine
    (one agent: the early one), no Slurm."""
    hosts = {slot.host for slot in spec.task_slots()}
    return spec.slurm is None and len(hosts) == 1 and spec.is_local(hosts.pop())


def launch_first(planner: Planner, run_dir: RunDir, early: EarlyAgent) -> FirstLaunch | None:
    """Send attempt 0's launch to ``early`` now, if the run is one it can be: a new run
    (:func:`can_launch_first`) and an early agent still waiting. None (nothing done) otherwise.
    Raises, having started nothing, what the coordinator would raise before its first launch
    (:class:`~launcher.output.rundir.RunDirError`, ``CheckpointDirInUse``, ``PortExhaustedError``)."""
    spec = planner.spec
    if not can_launch_first(spec) or run_dir.resuming or not early.waiting(planner.local_python):
        return None
    run_dir.check()
    allocator = PortAllocator()
    stack = contextlib.ExitStack()
    warnings = Warnings()
    try:
        wanted = planner.ports_to_allocate
        ports = dict(zip(wanted, allocator.allocate(len(wanted)), strict=True))
        plan = planner.plan(0, ports)
        directory = plan.checkpoint_dir
        if directory is not None:
            record = HolderRecord.this_process(spec.name, str(run_dir.path))
            stack.enter_context(held(FlockLockFile(directory), directory, record, warnings))
        run_dir.create()
        (host,) = plan.hosts  # can_launch_first: one host
        early.launch(plan.launch_message(host))
    except BaseException:
        stack.close()
        allocator.close()
        raise
    return FirstLaunch(run_dir, planner, ports, allocator, stack, warnings)
