"""What a run needs before the job machinery: its engine, planner and run directory, and, for a
new run of this machine alone, its reservation and first launch.

``tfcluster run`` and ``local`` use these right after validating the spec and before they import
the composition root (:mod:`launcher.cli.compose`): a run of the local engine reserves what its
first attempt needs (:func:`launcher.job.reservation.reserve`) and sends that attempt's launch to
the agent started early, so that the first tasks start while the rest of tfcluster is still being
imported. Nothing here imports the job loop.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.backends.engine import EngineOptions
from launcher.plan.planner import Planner
from launcher.run.directory import RunDir, new_run_dir
from launcher.ssh.deadline import DEFAULT_CONNECT_TIMEOUT_S

if TYPE_CHECKING:
    from launcher.backends.early_agent import EarlyAgent
    from launcher.backends.engine import Backend
    from launcher.backends.local.engine import LocalBackend
    from launcher.job.reservation import Reservation
    from launcher.job.resume import Resumption
    from launcher.spec.model import ClusterSpec


def engine_options(args: argparse.Namespace | None = None, *, early: EarlyAgent | None = None,
                   base_dir: str | None = None, first_attempt: int = 0) -> EngineOptions:
    """The engine options the command line gives (SSH's from ``--connect-timeout`` and
    ``--accept-new-host-keys``, where the verb has them)."""
    timeout = getattr(args, "connect_timeout", None)
    return EngineOptions(python=sys.executable, base_dir=base_dir or os.getcwd(),
                         connect_timeout_s=DEFAULT_CONNECT_TIMEOUT_S if timeout is None
                         else timeout,
                         accept_new_host_keys=bool(getattr(args, "accept_new_host_keys", False)),
                         early=early, first_attempt=first_attempt)


def planner_for(spec: ClusterSpec, backend: Backend, run_dir: str, base_dir: str) -> Planner:
    """``spec`` planned on ``backend`` for the run in ``run_dir``; relative paths start at
    ``base_dir``. A spec with a pool is placed by the run's :class:`HostPool` of the engine's
    pool hosts."""
    if spec.pool is None:
        return Planner(spec, backend.place, run_dir=run_dir, base_dir=base_dir)
    from launcher.plan.pool import HostPool

    pool = HostPool(spec, backend.pool(spec))
    return Planner(spec, pool.place, run_dir=run_dir, base_dir=base_dir, pool=pool)


def fresh_run_dir(spec: ClusterSpec, args: argparse.Namespace) -> RunDir:
    """The run directory of a new run: ``--run-dir``, or ``runs/<job>-<time>`` (created now, by
    this run alone: runs started at the same moment each get their own)."""
    from launcher.run.stored_spec import stored_spec
    from launcher.spec.loading import spec_base_dir

    path = Path(args.run_dir) if args.run_dir else new_run_dir(spec.name)
    return RunDir(path.absolute(), stored_spec=stored_spec(spec, spec_base_dir(spec)))


def check_local_hosts(spec: ClusterSpec, backend: LocalBackend, run_dir: str | None) -> None:
    """Pre-flight of a run on this machine, before anything is created or started (the probe
    ``tfcluster preflight`` runs: the tasks' script or module, their interpreter, ``worker`` and
    TensorFlow there, the spec's fixed ports, the checkpoint dir, unless it is in ``run_dir``:
    reserving the run directory creates it, and says what is wrong with that). Raises
    :class:`~launcher.preflight.gate.HostsNotReady`, one line per problem."""
    import dataclasses

    from launcher.preflight.gate import require_ready

    preview = planner_for(spec, backend, "", backend.options.base_dir).preview()
    inside = run_dir is not None and preview.checkpoint_dir is not None and \
        Path(preview.checkpoint_dir).is_relative_to(Path(run_dir).absolute())
    if inside:
        preview = dataclasses.replace(preview, checkpoint_dir=None)
    require_ready(spec.name, backend.probe(preview))


def check_resumed_hosts(resumption: Resumption, args: argparse.Namespace) -> None:
    """:func:`check_local_hosts` for ``tfcluster run --resume`` of a job of this machine: the
    script or interpreter may have gone, or a port been taken, since the run stopped."""
    if resumption.spec.engine != "local":
        return
    from launcher.backends.local.engine import LocalBackend

    # no early agent: this engine only probes (closing it would end the run's early agent)
    backend = LocalBackend(resumption.spec, engine_options(args, base_dir=resumption.base_dir))
    check_local_hosts(resumption.spec, backend, str(resumption.run_dir))


@dataclass
class FirstLaunch:
    """A new local run, started: its engine, planner and reservation, attempt 0 launched."""

    backend: Backend
    planner: Planner
    reservation: Reservation


def launch_first(spec: ClusterSpec, args: argparse.Namespace,
                 early: EarlyAgent) -> FirstLaunch | None:
    """Attempt 0 of a new run of the local engine, reserved and launched now through ``early``;
    None (nothing done) for a run of another engine. Raises, having kept nothing, what reserving
    raises (a run directory in use, a held checkpoint directory, no free ports), and
    :class:`~launcher.preflight.gate.HostsNotReady` when this machine cannot run the tasks."""
    if spec.engine != "local":
        return None
    from launcher.backends.local.engine import LocalBackend
    from launcher.job.reservation import reserve
    from launcher.spec.loading import spec_base_dir

    backend = LocalBackend(spec, engine_options(args, early=early, base_dir=spec_base_dir(spec)))
    check_local_hosts(spec, backend, args.run_dir)
    run_dir = fresh_run_dir(spec, args)
    planner = planner_for(spec, backend, str(run_dir.path), backend.options.base_dir)
    reservation = reserve(planner, run_dir, backend.chief_files)
    try:
        backend.launch_early(planner.plan(0, reservation.ports))
    except BaseException:
        reservation.release()
        raise
    return FirstLaunch(backend, planner, reservation)
