"""What a run holds before its first attempt, taken in one place for every run: the run directory
(checked, then created), the first attempt's ports, and the lock of the chief's checkpoint
directory (:func:`reserve`).

Nothing starts unless everything before it succeeded: a run directory in use, a checkpoint
directory another run holds, or no free ports raise here with nothing started and everything
taken so far let go. The coordinator runs from a :class:`Reservation` and releases it when the
job ends. A run of this machine alone takes it before the job machinery is even imported, so
that its first launch can go out at once (:mod:`launcher.cli.start`); this module imports only
what reserving needs (``tests/unit/project/test_layers.py`` keeps the job loop out of it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from launcher.chief.access import ChiefFiles
from launcher.chief.checkpoints import latest_checkpoint
from launcher.chief.lock import HolderRecord, held
from launcher.plan.planner import HostPlan, Planner
from launcher.plan.ports import PortAllocator, port_seed
from launcher.run.directory import RunDir
from worker.wire.tfconfig import TaskId


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
class Reservation:
    """What :func:`reserve` holds for the coordinator, which owns it from then on: the run
    directory (created), the ports of the first attempt and their allocator, the checkpoint
    directory's lock (``held``) and the warnings said before the console existed."""

    run_dir: RunDir
    ports: dict[TaskId, int]
    allocator: PortAllocator
    held: contextlib.ExitStack
    warnings: Warnings

    def release(self) -> None:
        """Let the lock and the ports go (safe to call more than once)."""
        try:
            self.held.close()
        finally:
            self.allocator.close()


def earlier_checkpoint(chief_files: ChiefFiles, chief: HostPlan, directory: str,
                       say: Callable[[str], None]) -> None:
    """A new run whose checkpoint dir already holds a checkpoint (an earlier run's) says so in
    one line: its tasks find it there and resume from it, as TF's ``CheckpointManager`` and
    Keras' ``BackupAndRestore`` do."""
    with chief_files.fs(chief) as fs:
        found = None if fs is None else latest_checkpoint(directory, fs).checkpoint
    if found is not None:
        step = "" if found.step is None else f" at step {found.step}"
        say(f"resuming the checkpoint an earlier run left in {directory}{step}: a script that "
            "restores the latest checkpoint there continues from it (remove the dir, or give "
            "another checkpoint.dir, to start fresh)")


def reserve(planner: Planner, run_dir: RunDir, chief_files: ChiefFiles, *,
            warnings: Warnings | None = None, ports: PortAllocator | None = None) -> Reservation:
    """Take what the first attempt of ``planner``'s job needs, in order: check the run
    directory, allocate the ports, lock the chief's checkpoint directory (a chief whose directory
    cannot be locked is said in ``warnings``, and the run goes on), create the run directory.
    Raises :class:`~launcher.run.directory.RunDirError`, ``CheckpointDirInUse`` or
    ``PortExhaustedError`` having kept nothing. ``ports``: the allocator (default: a new one)."""
    warnings = warnings or Warnings()
    run_dir.check()
    allocator = ports or PortAllocator()
    allocator.seed = port_seed(planner.spec.name)  # the ports ``tfcluster plan`` showed
    stack = contextlib.ExitStack()
    try:
        preview = planner.preview()
        wanted = planner.ports_to_allocate
        first_ports = dict(zip(wanted, allocator.allocate(len(wanted)), strict=True))
        directory = preview.checkpoint_dir
        inside = directory is not None and preview.chief_host.local and \
            Path(directory).is_relative_to(run_dir.path)
        if inside:  # ``tfcluster local``'s own checkpoint dir: the run dir's problems come first
            run_dir.create()
            stack.callback(run_dir.release)
        if directory is not None:
            chief = preview.chief_host
            lock = stack.enter_context(chief_files.lock(chief, directory))
            if lock is None:
                warnings(f"cannot lock checkpoint dir {directory} on {chief.name}: nothing "
                         "stops another run from using it at the same time")
            else:
                record = HolderRecord.this_process(planner.spec.name, str(run_dir.path))
                stack.enter_context(held(lock, directory, record, warnings))
            if not run_dir.resuming:
                earlier_checkpoint(chief_files, chief, directory, warnings)
        if not inside:
            run_dir.create()
    except BaseException:
        stack.close()
        allocator.close()
        raise
    return Reservation(run_dir, first_ports, allocator, stack, warnings)
