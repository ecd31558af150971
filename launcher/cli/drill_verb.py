"""``tfcluster drill SPEC --fault ...`` or ``tfcluster drill SUITE.yaml``: the command line's side
of :mod:`launcher.drill` (which file it is, the faults from the options, how a job is run)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from launcher.drill.coordinator_loss import ChildRunner
from launcher.drill.drive import DrillRequest, run_drill, single_scenario
from launcher.drill.faults import Action, Fault, check_targets, parse_faults
from launcher.drill.injector import DEFAULT_RANDOM_HORIZON, resolve
from launcher.drill.session import Plan, run_with_faults
from launcher.drill.suite import is_suite, load_suite
from launcher.errors import UsageError
from launcher.job.hooks import AttemptHooks
from launcher.run.directory import new_run_dir
from launcher.spec.errors import SpecError
from launcher.spec.model import ClusterSpec

_SOURCE = "tfcluster drill"


def faults_from_args(args: argparse.Namespace, spec: ClusterSpec,
                     required: bool = True) -> list[Fault]:
    texts: list[str] = list(args.fault or [])
    if args.task is not None or args.at_step is not None:  # the old shorthand
        if args.task is None or args.at_step is None:
            raise UsageError("tfcluster drill: --task and --at-step go together (or write "
                             "--fault ACTION:TASK:at-step=N)")
        actions = texts or ["kill"]
        if any(":" in a for a in actions):
            raise UsageError("tfcluster drill: with --task, --fault is only an action (kill, "
                             "term, stop, crash); or drop --task and write ACTION:TARGET:TRIGGER")
        texts = [f"{a}:{args.task}:at-step={args.at_step}" for a in actions]
    if not texts and required:
        raise UsageError("tfcluster drill: give at least one --fault ACTION:TARGET[:TRIGGER] "
                         "(e.g. --fault kill:worker:1:at-step=100), or a drill file")
    faults = parse_faults(texts, "--fault", _SOURCE)
    slots = spec.task_slots()
    problems = check_targets(faults, [str(s.task) for s in slots],
                             sorted({s.host for s in slots}), "--fault")
    if problems:
        raise SpecError(_SOURCE, problems)
    return faults


def _run_job_for(args: argparse.Namespace) -> Callable[[ClusterSpec, Path, AttemptHooks | None],
                                                        int]:
    from launcher.cli.compose import run_job

    def run(spec: ClusterSpec, run_dir: Path, hooks: AttemptHooks | None) -> int:
        job_args = argparse.Namespace(**{**vars(args), "run_dir": str(run_dir)})
        return run_job(spec, job_args, faults=hooks).exit_code

    return run


def cmd_drill(args: argparse.Namespace, load_for_run: Callable[[argparse.Namespace],
                                                                ClusterSpec]) -> int:
    path = Path(args.spec)
    if args.random_horizon is not None and not 1 <= args.random_horizon <= 10**9:
        raise UsageError("tfcluster drill: --random-horizon must be a step from 1 to 10^9")
    if args.seed is not None and not 0 <= args.seed < 2**32:
        raise UsageError("tfcluster drill: --seed must be from 0 to 2^32-1")
    horizon = args.random_horizon or DEFAULT_RANDOM_HORIZON
    if not args.in_child and is_suite(path):
        if args.fault or args.task is not None or args.checkpoint_dir:
            raise UsageError(f"tfcluster drill: {path} is a drill file with its own scenarios "
                             "(each with its own checkpoint directory); --fault, --task and "
                             "--checkpoint-dir are for a spec")
        suite = load_suite(path)
        plan = Plan(suite.spec, suite.spec_path, args.seed if args.seed is not None
                    else suite.seed, args.random_horizon or suite.random_horizon)
        request = DrillRequest(plan, suite.scenarios, suite.repeat,
                               _run_dir(args, suite.spec.name), args.baseline or suite.baseline,
                               _baseline_from(args), single=False)
        return run_drill(request, _run_job_for(args), ChildRunner(Path.cwd()))
    spec = load_for_run(args)
    faults = faults_from_args(args, spec, required=not args.in_child)
    seed = args.seed or 0
    if args.in_child:  # the coordinator a kill-coordinator drill kills: run the job, nothing more
        if any(f.action is Action.KILL_COORDINATOR for f in faults):
            raise UsageError("tfcluster drill --in-child: kill-coordinator is the parent's fault")
        task_hosts = {str(s.task): s.host for s in spec.task_slots()}
        return run_with_faults(spec, Path(args.run_dir), resolve(faults, task_hosts, seed, horizon),
                               _run_job_for(args)).exit_code
    plan = Plan(spec, path.absolute(), seed, horizon,
                checkpoint_dir_given=bool(args.checkpoint_dir))
    request = DrillRequest(plan, (single_scenario(faults),), 1, _run_dir(args, spec.name),
                           args.baseline, _baseline_from(args), single=True)
    return run_drill(request, _run_job_for(args), ChildRunner(Path.cwd()))


def _run_dir(args: argparse.Namespace, name: str) -> Path:
    """``--run-dir``, else a new ``runs/drill-<job>-<stamp>`` claimed with ``mkdir`` (drills
    started at the same moment each get their own)."""
    return Path(args.run_dir or new_run_dir(f"drill-{name}")).absolute()


def _baseline_from(args: argparse.Namespace) -> Path | None:
    return None if args.baseline_from is None else Path(args.baseline_from).absolute()
