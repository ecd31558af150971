"""One function per ``tfcluster`` verb: read the arguments, load the spec, hand over to the plan,
pre-flight or the composition root, and return the exit code.

Imports are kept inside the verbs so that ``tfcluster --help`` and ``validate`` start fast; no
verb ever imports TensorFlow. Errors are raised as :class:`~launcher.errors.TfclusterError` and
printed once, by :func:`launcher.cli.main.main`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from launcher.errors import UsageError

if TYPE_CHECKING:
    from launcher.spec.model import ClusterSpec


def _load(path: str) -> ClusterSpec:
    from launcher.spec.loading import load_spec

    return load_spec(path)


def _load_for_run(args: argparse.Namespace) -> ClusterSpec:
    """The spec with ``--checkpoint-dir`` applied, validated again as a whole."""
    from launcher.spec.loading import spec_from_dict

    spec = _load(args.spec)
    if not args.checkpoint_dir:
        return spec
    data = {**spec.model_dump(), "checkpoint": {"dir": args.checkpoint_dir}}
    return spec_from_dict(data, source=f"{args.spec} with --checkpoint-dir")


def cmd_validate(args: argparse.Namespace) -> int:
    spec = _load(args.spec)
    slots = spec.task_slots()
    hosts = {s.host for s in slots}
    print(f"{args.spec}: OK ({len(slots)} task(s) on {len(hosts)} host(s))")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from launcher.output.rundir import default_run_dir
    from launcher.plan.ports import PortAllocator
    from launcher.plan.view import plan_json, plan_text

    spec = _load(args.spec)
    from launcher.cli.compose import planner_for

    planner = planner_for(spec, str(default_run_dir(spec.name).absolute()))
    with PortAllocator() as allocator:
        wanted = planner.ports_to_allocate
        launch_plan = planner.plan(0, dict(zip(wanted, allocator.allocate(len(wanted)),
                                               strict=True)))
    print(plan_json(launch_plan) if args.json else plan_text(launch_plan))
    return 0


def cmd_preflight(args: argparse.Namespace) -> int:
    from launcher.preflight.entry import PreflightOptions, preflight
    from launcher.preflight.view import print_report

    spec = _load(args.spec)
    options = PreflightOptions(connect_timeout_s=args.connect_timeout,
                               accept_new_host_keys=args.accept_new_host_keys)
    from launcher.cli.compose import planner_for

    report = preflight(planner_for(spec, "").preview(), options)
    print_report(report, sys.stdout)
    return 0 if report.ok else 1


def cmd_run(args: argparse.Namespace) -> int:
    from launcher.cli.compose import run_job

    return run_job(_load_for_run(args), args).exit_code


def cmd_drill(args: argparse.Namespace) -> int:
    from launcher.cli.compose import run_job
    from launcher.job import drill
    from launcher.output.events import read_events

    spec = _load_for_run(args)
    if args.task not in {str(s.task) for s in spec.task_slots()}:
        tasks = ", ".join(str(s.task) for s in spec.task_slots())
        raise UsageError(f"tfcluster drill: no task {args.task!r} in {args.spec} (tasks: {tasks})")
    fault = drill.Fault(task=args.task, at_step=args.at_step, signal=drill.FAULTS[args.fault])
    outcome = run_job(spec, args, faults=drill.FaultInjector(fault))
    if not outcome.started:  # the preflight stopped it before it started
        return outcome.exit_code
    for line in drill.report(read_events(outcome.run_dir / "events.jsonl")).lines():
        print(line)
    return outcome.exit_code


def local_spec_data(args: argparse.Namespace) -> dict[str, Any]:
    """The spec that ``tfcluster local`` runs, as data (validated like a file would be)."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.module:
        entrypoint: dict[str, Any] = {"module": args.module, "args": command}
    elif not command:
        raise UsageError("tfcluster local: give a command after --, or -m MODULE")
    elif command[0].endswith(".py"):
        entrypoint = {"script": command[0], "args": command[1:]}
    else:
        entrypoint = {"command": command}
    tasks: list[dict[str, Any]] = []
    workers = args.num_tasks
    if args.chief:
        tasks.append({"type": "chief", "host": "localhost"})
        workers -= 1
    if workers > 0:
        tasks.append({"type": "worker", "host": "localhost", "count": workers})
    health: dict[str, Any] = {"hang_timeout_s": args.hang_timeout,
                              "startup_timeout_s": args.startup_timeout}
    if args.grace_period is not None:
        health["grace_period_s"] = args.grace_period
    data: dict[str, Any] = {
        "name": args.name, "entrypoint": entrypoint, "tasks": tasks,
        "restart": {"max_restarts": args.max_restarts}, "health": health,
    }
    if args.checkpoint_dir:
        data["checkpoint"] = {"dir": args.checkpoint_dir}
    return data


def cmd_local(args: argparse.Namespace) -> int:
    from launcher.cli.compose import run_job
    from launcher.spec.limits import MAX_TASKS, TASK_LIMIT_REASON
    from launcher.spec.loading import spec_from_dict

    if not 1 <= args.num_tasks <= MAX_TASKS:
        raise UsageError(f"tfcluster local: -n must be between 1 and {MAX_TASKS} "
                         f"({TASK_LIMIT_REASON})")
    spec = spec_from_dict(local_spec_data(args), source="tfcluster local")
    return run_job(spec, args).exit_code


COMMANDS = {"run": cmd_run, "local": cmd_local, "plan": cmd_plan, "validate": cmd_validate,
            "drill": cmd_drill, "preflight": cmd_preflight}
