"""After an attempt that did not succeed: the checkpoint the next attempt resumes from, read from
the chief's checkpoint directory (non-chief copies cleared first, checkpoints that could not be
restored skipped), and whether the attempt moved it forward."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from launcher.chief.access import ChiefFiles
from launcher.chief.checkpoints import CheckpointFS, latest_checkpoint, remove_worker_temp_dirs
from launcher.output.console import Console
from launcher.plan.planner import HostPlan, LaunchPlan, ResumePoint
from launcher.run.events import CheckpointFound, Event, SkippedCheckpoint
from launcher.run.outcome import AttemptResult


def find_resume(launch_plan: LaunchPlan, result: AttemptResult, previous: ResumePoint | None,
                *, chief_files: ChiefFiles, bad: set[str], console: Console,
                emit: Callable[[Event], None],
                shared_dir: bool) -> tuple[AttemptResult, ResumePoint | None]:
    """``result`` with its checkpoint progress, and the next resume point (``previous`` when
    none can be read). ``shared_dir``: every host sees the directory (a pool's), so it is read
    through another host of the attempt when the chief's was lost."""
    directory = launch_plan.checkpoint_dir
    if directory is None:
        return result, previous
    chief = launch_plan.chief_host
    if shared_dir and chief.name in result.lost_hosts:
        chief = next((h for h in launch_plan.hosts if h.name not in result.lost_hosts), chief)
    with chief_files.fs(chief) as fs:
        return _find(launch_plan, result, previous, directory=directory, chief=chief, fs=fs,
                     bad=bad, console=console, emit=emit)


def _find(launch_plan: LaunchPlan, result: AttemptResult, previous: ResumePoint | None, *,
          directory: str, chief: HostPlan, fs: CheckpointFS | None, bad: set[str],
          console: Console,
          emit: Callable[[Event], None]) -> tuple[AttemptResult, ResumePoint | None]:
    if fs is None:
        console.warn(f"cannot read the chief's checkpoints on {chief.name}; "
                     "the next attempt starts without a resume checkpoint")
        return result, previous
    removed = remove_worker_temp_dirs(directory, fs)
    if removed:
        console.say(f"removed {len(removed)} non-chief checkpoint copies")
    found = latest_checkpoint(directory, fs, bad=bad)
    for skipped in found.skipped:
        console.warn(f"skipping checkpoint {skipped.prefix}: {skipped.reason}")
    checkpoint = found.checkpoint
    resume = None
    if checkpoint is not None:
        resume = ResumePoint(checkpoint.prefix, checkpoint.step)
        emit(CheckpointFound(
            attempt=launch_plan.attempt, step=checkpoint.step, checkpoint=checkpoint.prefix,
            directory=found.directory,
            skipped=tuple(SkippedCheckpoint(s.prefix, s.reason) for s in found.skipped)))
    before = -1 if previous is None or previous.step is None else previous.step
    after = -1 if checkpoint is None or checkpoint.step is None else checkpoint.step
    result = dataclasses.replace(
        result, checkpoint_step=None if checkpoint is None else checkpoint.step,
        made_progress=after > before)
    return result, resume


def latest_resume(launch_plan: LaunchPlan, *, chief_files: ChiefFiles,
                  bad: set[str]) -> ResumePoint | None:
    """The chief's latest complete checkpoint now (None: none, or it cannot be read): what a
    chief started again alone resumes from (ParameterServerStrategy)."""
    if launch_plan.checkpoint_dir is None:
        return None
    with chief_files.fs(launch_plan.chief_host) as fs:
        if fs is None:
            return None
        checkpoint = latest_checkpoint(launch_plan.checkpoint_dir, fs, bad=bad).checkpoint
    return None if checkpoint is None else ResumePoint(checkpoint.prefix, checkpoint.step)
