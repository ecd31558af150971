"""The composition root of ``tfcluster run`` / ``local`` / ``drill``: the one place where the
pieces are chosen and wired together (planner, pre-flight, backends, checkpoint access, console,
live status, coordinator, signal handlers). Everything below it is handed what it needs.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.backends.local import LocalBackend
from launcher.backends.router import HostRouter
from launcher.cli.start import fresh_run_dir, planner_for
from launcher.job.chief_files import FSForHost, LockForHost, local_fs_only, local_lock_only
from launcher.job.coordinator import Coordinator
from launcher.job.resume import FRESH, Resumption
from launcher.job.state import JobState
from launcher.output.console import HOLD_S, Console
from launcher.output.rundir import RunDir
from launcher.output.status import PlainStatus, StatusBoard

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from launcher.backends.base import Backend
    from launcher.backends.early_agent import EarlyAgent
    from launcher.cli.slurm_run import SlurmParts
    from launcher.job.checkpoint_lock import LockFile
    from launcher.job.checkpoints import CheckpointFS
    from launcher.job.first_launch import FirstLaunch
    from launcher.job.hooks import AttemptHooks
    from launcher.plan.planner import HostPlan, Planner
    from launcher.spec.model import ClusterSpec
    from launcher.ssh.connector import SshConnector

_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class RunOutcome:
    exit_code: int
    run_dir: Path
    #: False when pre-flight stopped the job before anything was started.
    started: bool


def _connector(args: argparse.Namespace) -> SshConnector:
    from launcher.ssh.connector import SshConnector  # paramiko: only for specs with remote hosts

    return SshConnector(accept_new_host_keys=args.accept_new_host_keys,
                        connect_timeout_s=args.connect_timeout)


def _hosts_ready(planner: Planner, connector: SshConnector, args: argparse.Namespace) -> bool:
    from launcher.preflight.entry import PreflightOptions, preflight
    from launcher.preflight.view import report_before_run

    options = PreflightOptions(connect_timeout_s=args.connect_timeout,
                               accept_new_host_keys=args.accept_new_host_keys)
    report = preflight(planner.preview(), options, connector)
    return report_before_run(report, planner.spec.name, sys.stderr)


def _remote_backend(connector: SshConnector) -> tuple[Backend, FSForHost, LockForHost]:
    from launcher.backends.ssh import SshBackend
    from launcher.job.remote_lock import sftp_lock_file
    from launcher.ssh.sftp import remote_checkpoint_fs

    def checkpoint_fs(host: HostPlan) -> AbstractContextManager[CheckpointFS | None]:
        return local_fs_only(host) if host.local else remote_checkpoint_fs(connector, host)

    def checkpoint_lock(host: HostPlan, directory: str) -> AbstractContextManager[LockFile | None]:
        if host.local:
            return local_lock_only(host, directory)
        return sftp_lock_file(remote_checkpoint_fs(connector, host), directory)

    return SshBackend(connector), checkpoint_fs, checkpoint_lock


def _slurm_parts(planner: Planner) -> SlurmParts | None:
    from launcher.cli.slurm_run import slurm_parts  # srun and sbatch: only for a slurm spec

    return slurm_parts(planner)


def _run_dir(spec: ClusterSpec, args: argparse.Namespace, resumed: Resumption | None) -> RunDir:
    if resumed is not None:
        return RunDir(resumed.run_dir, resuming=True)
    return fresh_run_dir(spec, args)


def run_job(spec: ClusterSpec, args: argparse.Namespace, faults: AttemptHooks | None = None, *,
            resumed: Resumption | None = None, notes: Sequence[str] = (),
            early: EarlyAgent | None = None, first: FirstLaunch | None = None) -> RunOutcome:
    """Run ``spec`` to the end as the command line asked; the exit code is the job's.
    ``resumed``: continue that run instead (``tfcluster run --resume``); ``notes``: lines to say
    once the job has started (not before a run directory error, say); ``early``: a local agent
    the command line started while tfcluster was starting (the first local agent, if fit);
    ``first``: attempt 0, already launched through it (:mod:`launcher.cli.start`)."""
    local = LocalBackend(python=sys.executable, early=early)
    try:
        return _run_job(spec, args, local, faults=faults, resumed=resumed, notes=notes,
                        first=first)
    finally:
        local.discard_early()


def _run_job(spec: ClusterSpec, args: argparse.Namespace, local: LocalBackend, *,
             faults: AttemptHooks | None, resumed: Resumption | None,
             notes: Sequence[str], first: FirstLaunch | None) -> RunOutcome:
    run_dir = first.run_dir if first is not None else _run_dir(spec, args, resumed)
    planner = first.planner if first is not None else \
        planner_for(spec, str(run_dir.path), resumed.base_dir if resumed else None)
    remote: Backend | None = None
    checkpoint_fs: FSForHost = local_fs_only
    checkpoint_lock: LockForHost = local_lock_only
    slurm = _slurm_parts(planner) if spec.slurm is not None else None
    if slurm is not None:
        from launcher.cli.slurm_run import slurm_ready

        if not slurm_ready(planner, args):
            return RunOutcome(1, run_dir.path, started=False)
        remote, checkpoint_fs, checkpoint_lock = slurm.backend, slurm.fs, slurm.lock
    hosts = planner.preview().hosts if slurm is None else ()
    if not any(host.local for host in hosts):
        local.discard_early()
    if slurm is None and any(not host.local for host in hosts):
        connector = _connector(args)
        if not _hosts_ready(planner, connector, args):
            return RunOutcome(1, run_dir.path, started=False)
        remote, checkpoint_fs, checkpoint_lock = _remote_backend(connector)
    console = Console(show_task_output=not args.quiet, verbose=args.verbose, hold_s=HOLD_S,
                      at_job_start=notes)
    board = StatusBoard()
    live = console.interactive and not args.quiet
    listener = board.apply if live else PlainStatus(console, board)
    coordinator = Coordinator(planner, run_dir,
                              HostRouter(local=local, remote=remote),
                              console, hooks=slurm.hooks(faults) if slurm else faults,
                              listeners=[listener, console.on_event,
                                         *(slurm.listeners if slurm else [])],
                              checkpoint_fs=checkpoint_fs, checkpoint_lock=checkpoint_lock,
                              start=resumed.start if resumed else FRESH, first=first)
    handled = (*_HANDLED_SIGNALS, *(slurm.signals if slurm else ()))
    previous = {sig: signal.signal(sig, coordinator.interrupt) for sig in handled}
    # Everything imported and built so far lives as long as the job: keep the garbage
    # collector from scanning it over and over (its full passes were the coordinator's largest
    # CPU cost while it watched 64 tasks); it may have been off while tfcluster started.
    gc.freeze()
    gc.enable()
    try:
        with console.live(board.table) if live else contextlib.nullcontext(), \
                slurm.guard(run_dir.path) if slurm else contextlib.nullcontext():
            result = coordinator.run()
    finally:
        run_dir.release()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if slurm is not None and slurm.exit_code:  # stopped to be resubmitted without some nodes
        console.close()
        return RunOutcome(slurm.exit_code[0], run_dir.path, started=True)
    attempts = len(result.attempts)
    if result.state is JobState.SUCCEEDED:
        console.say(f"job {spec.name} succeeded ({attempts} attempt(s)); run dir {run_dir.path}")
    else:
        console.error(f"job {spec.name} failed: {result.reason}; exit code {result.exit_code}; "
                      f"run dir {run_dir.path}")
    console.close()
    return RunOutcome(result.exit_code, run_dir.path, started=True)
