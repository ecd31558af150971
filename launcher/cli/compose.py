"""The composition root of ``tfcluster run`` / ``local`` / ``drill``: the one place where the
pieces are chosen and wired together (the engine, planner, pre-flight, console, live status,
coordinator, signal handlers). Everything below it is handed what it needs; nothing here knows
which engine runs the job.
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

from launcher.backends import create_backend
from launcher.cli.start import engine_options, fresh_run_dir, planner_for
from launcher.cli.stopped import latest_step, stopped_line, stopped_signal
from launcher.job.coordinator import Coordinator
from launcher.job.resume import FRESH, Resumption
from launcher.job.state import JobState
from launcher.job.suspend import Suspender
from launcher.output.console import HOLD_S, Console
from launcher.output.status import PlainStatus, StatusBoard
from launcher.run.directory import RunDir
from launcher.spec.loading import spec_base_dir

if TYPE_CHECKING:
    from launcher.backends.early_agent import EarlyAgent
    from launcher.backends.engine import Backend
    from launcher.cli.start import FirstLaunch
    from launcher.job.hooks import AttemptHooks
    from launcher.spec.model import ClusterSpec

_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class RunOutcome:
    exit_code: int
    run_dir: Path
    #: False when pre-flight stopped the job before anything was started.
    started: bool


def _console_class(args: argparse.Namespace) -> type[Console]:
    """``tfcluster local``'s console names its flags where others name spec fields."""
    if getattr(args, "verb", None) == "local":
        from launcher.cli.local_words import FlagConsole

        return FlagConsole
    return Console


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
    the command line started while tfcluster was starting (the local engines take it);
    ``first``: a local run already reserved and launched (:mod:`launcher.cli.start`)."""
    if first is not None:
        backend = first.backend
    else:
        backend = create_backend(spec, engine_options(
            args, early=early, base_dir=resumed.base_dir if resumed else spec_base_dir(spec),
            first_attempt=resumed.start.first_attempt if resumed else 0))
    try:
        return _run_job(spec, args, backend, faults=faults, resumed=resumed, notes=notes,
                        first=first)
    finally:
        backend.close()


def _run_job(spec: ClusterSpec, args: argparse.Namespace, backend: Backend, *,
             faults: AttemptHooks | None, resumed: Resumption | None,
             notes: Sequence[str], first: FirstLaunch | None) -> RunOutcome:
    if first is not None:
        run_dir, planner = first.reservation.run_dir, first.planner
    else:
        run_dir = _run_dir(spec, args, resumed)
        planner = planner_for(spec, backend, str(run_dir.path),
                              resumed.base_dir if resumed else spec_base_dir(spec))
    if backend.probes_before_run:
        from launcher.preflight.view import report_before_run

        preview = planner.preview()
        if not any(host.local for host in preview.hosts):
            backend.close()  # the early agent: no host of this run is this machine
        if not report_before_run(backend.probe(preview), spec.name, sys.stderr):
            return RunOutcome(1, run_dir.path, started=False)
    session = backend.session()
    console = _console_class(args)(show_task_output=not args.quiet, verbose=args.verbose,
                                   hold_s=HOLD_S, at_job_start=notes)
    board = StatusBoard()
    live = console.interactive and not args.quiet
    listener = board.apply if live else PlainStatus(console, board)
    coordinator = Coordinator(planner, run_dir, backend, console, session=session,
                              reservation=first.reservation if first else None, hooks=faults,
                              listeners=[listener, console.on_event],
                              start=resumed.start if resumed else FRESH)
    handled = (*_HANDLED_SIGNALS, *session.stop_signals)
    previous = {sig: signal.signal(sig, coordinator.interrupt) for sig in handled}
    previous[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, Suspender(coordinator.agents, console))
    # Everything imported and built so far lives as long as the job: keep the garbage
    # collector from scanning it over and over (its full passes were the coordinator's largest
    # CPU cost while it watched 64 tasks); it may have been off while tfcluster started.
    gc.freeze()
    gc.enable()
    try:
        with console.live(board.table) if live else contextlib.nullcontext(), \
                session.running(run_dir.path):
            result = coordinator.run()
    finally:
        run_dir.release()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if session.exit_code is not None:  # the engine ended the run (to be resubmitted, say)
        console.close()
        return RunOutcome(session.exit_code, run_dir.path, started=True)
    attempts = len(result.attempts)
    alone = sum(sum(a.task_restarts.values()) for a in result.attempts)
    if result.state is JobState.SUCCEEDED:
        singles = f", {alone} single-task restart(s)" if alone else ""
        console.say(f"job {spec.name} succeeded ({attempts} attempt(s){singles}); run dir "
                    f"{run_dir.path}")
    elif (stopped := stopped_signal(result.attempts, result.reason)) is not None:
        step = latest_step(planner.preview(), backend.chief_files)
        console.warn(stopped_line(spec.name, stopped, step, run_dir.path, result.exit_code))
    else:
        console.error(f"job {spec.name} failed: {result.reason}; exit code {result.exit_code}; "
                      f"run dir {run_dir.path}")
    console.close()
    return RunOutcome(result.exit_code, run_dir.path, started=True)
