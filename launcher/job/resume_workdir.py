"""Before a run is resumed: the workdir its tasks start in must still be there. A run resumed
days later may find it removed (a temporary checkout, a cleaned scratch directory); every attempt
would then fail to start its tasks, so ``tfcluster run --resume`` says so in one line instead.

Checked here for the tasks of this machine (the local engine), where the workdir is resolved
against the directory the run was started in; a remote host's agent checks its own before it
starts a task (:meth:`worker.agent.task_process.TaskProcess.start`).
"""

from __future__ import annotations

import os
from pathlib import Path

from launcher.errors import TfclusterError
from launcher.plan.placement import absolute
from launcher.spec.model import ClusterSpec


def check_workdir(run_dir: Path, spec: ClusterSpec, base_dir: str) -> None:
    """TfclusterError if the workdir the resumed run's local tasks start in no longer exists."""
    if spec.engine != "local":
        return
    workdir = absolute(spec.workdir, base_dir)
    if os.path.isdir(workdir):
        return
    where = "" if os.path.isabs(os.path.expanduser(spec.workdir)) else \
        f", the spec's workdir {spec.workdir!r} from {base_dir}, where the run was started"
    raise TfclusterError(f"tfcluster run --resume {run_dir}: workdir {workdir} no longer exists "
                         f"(its tasks start there{where}); restore it, or start a new run")
