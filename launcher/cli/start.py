"""What a run needs before the job machinery: its planner, its run directory, and, for a run of
this machine alone, the first attempt's launch (:mod:`launcher.job.first_launch`).

``tfcluster run`` and ``local`` use these right after validating the spec and before they import
the composition root (:mod:`launcher.cli.compose`), so that the first tasks start while the rest of
tfcluster is still being imported. Nothing here imports the job loop.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.output.rundir import RunDir, default_run_dir
from launcher.plan.addresses import local_task_address
from launcher.plan.planner import Planner

if TYPE_CHECKING:
    from launcher.backends.early_agent import EarlyAgent
    from launcher.job.first_launch import FirstLaunch
    from launcher.spec.model import ClusterSpec


def planner_for(spec: ClusterSpec, run_dir: str, base_dir: str | None = None) -> Planner:
    """This machine's planner for ``spec``: tfcluster's interpreter for local tasks, paths
    relative to the current directory, local tasks at the address remote hosts reach; for a
    spec with ``slurm:``, the nodes of the allocation this process runs in. ``base_dir``: where
    relative paths start instead (a resumed run's, as stored)."""
    if spec.slurm is not None:
        from launcher.cli.slurm_run import slurm_planner

        return slurm_planner(spec, run_dir, base_dir=base_dir or os.getcwd())
    return Planner(spec, run_dir=run_dir, local_python=sys.executable,
                   base_dir=base_dir or os.getcwd(),
                   local_address=local_task_address(spec))


def fresh_run_dir(spec: ClusterSpec, args: argparse.Namespace) -> RunDir:
    """The run directory of a new run: ``--run-dir``, or ``runs/<job>-<time>``."""
    from launcher.job.stored_spec import stored_spec

    return RunDir(Path(args.run_dir or default_run_dir(spec.name)).absolute(),
                  stored_spec=stored_spec(spec, os.getcwd()))


def launch_first(spec: ClusterSpec, args: argparse.Namespace,
                 early: EarlyAgent) -> FirstLaunch | None:
    """Attempt 0 of a new run of this machine alone, launched now through ``early``; None when
    the run is not one that can start so (remote hosts, Slurm)."""
    from launcher.job.first_launch import can_launch_first
    from launcher.job.first_launch import launch_first as launch

    if not can_launch_first(spec):
        return None
    run_dir = fresh_run_dir(spec, args)
    return launch(planner_for(spec, str(run_dir.path)), run_dir, early)
