"""The last line of a run the user stopped (Ctrl-C, SIGTERM, SIGHUP): not a failure of the job,
but where it stopped and how to go on from there.

Every task saves at one step when tfcluster stops them gracefully (a script that saves on
SIGTERM); the chief's latest complete checkpoint, found as a restart would find it, is the step
``tfcluster run --resume RUN_DIR`` continues from.
"""

from __future__ import annotations

from pathlib import Path

from launcher.chief.access import ChiefFiles
from launcher.chief.checkpoints import latest_checkpoint
from launcher.job.resume import STOPPED_PREFIX
from launcher.plan.planner import LaunchPlan
from launcher.run.outcome import AttemptResult


def stopped_signal(attempts: list[AttemptResult], reason: str) -> str | None:
    """The signal that stopped the run (``SIGINT``), or None if nothing stopped it."""
    last = attempts[-1] if attempts else None
    if last is not None and last.interrupt_signal is not None:
        return last.interrupt_signal
    return reason[len(STOPPED_PREFIX):] if reason.startswith(STOPPED_PREFIX) else None


def latest_step(preview: LaunchPlan, chief_files: ChiefFiles) -> int | None:
    """The step of the chief's latest complete checkpoint (None: none, no checkpoint dir, or
    not readable here)."""
    directory = preview.checkpoint_dir
    if directory is None:
        return None
    with chief_files.fs(preview.chief_host) as fs:
        if fs is None:
            return None
        found = latest_checkpoint(directory, fs).checkpoint
    return None if found is None else found.step


def stopped_line(job: str, signal_name: str, step: int | None, run_dir: Path,
                 exit_code: int) -> str:
    """``job X stopped by SIGINT (Ctrl-C) with its checkpoints saved up to step N: tfcluster
    run --resume RUN_DIR continues from there``."""
    resume = f"tfcluster run --resume {run_dir}"
    by = f"{signal_name} (Ctrl-C)" if signal_name == "SIGINT" else signal_name
    if step is None:
        where = (f"with no checkpoint tfcluster knows of ({resume} starts it again; a script "
                 "that restores checkpoints of its own resumes from them)")
    else:
        where = f"with its checkpoints saved up to step {step}: {resume} continues from there"
    return f"job {job} stopped by {by} {where}; exit code {exit_code}"
