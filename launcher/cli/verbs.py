"""One function per ``tfcluster`` verb: read the arguments, load the spec, hand over to the plan,
pre-flight or the composition root, and return the exit code.

Imports are kept inside the verbs so that ``tfcluster --help`` and ``validate`` start fast; no
verb ever imports TensorFlow. Errors are raised as :class:`~launcher.errors.TfclusterError` and
printed once, by :func:`launcher.cli.main.main`.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import TYPE_CHECKING, Any

from launcher.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from launcher.backends.early_agent import EarlyAgent
    from launcher.backends.engine import Backend
    from launcher.spec.model import ClusterSpec


def _load(path: str) -> ClusterSpec:
    """The spec at ``path``; a line on stderr for each old field name it still uses."""
    from launcher.spec.loading import load_spec
    from launcher.spec.placement import renamed_fields

    spec = load_spec(path)
    for line in renamed_fields(spec.slurm):
        print(f"tfcluster: {path}: {line}", file=sys.stderr)
    return spec


def _base_dir(spec: ClusterSpec) -> str:
    """Where the relative paths of ``spec`` start: its file's directory."""
    from launcher.spec.loading import spec_base_dir

    return spec_base_dir(spec)


def _load_for_run(args: argparse.Namespace) -> ClusterSpec:
    """The spec with ``--checkpoint-dir`` applied, validated again as a whole. A relative
    ``--checkpoint-dir`` is a path of the command line: it starts at the current directory (a
    remote chief's must be absolute, as in the spec)."""
    from launcher.spec.loading import located, spec_from_dict

    spec = _load(args.spec)
    if not args.checkpoint_dir:
        return spec
    given = args.checkpoint_dir
    chief = next((g.host for g in spec.tasks if g.type == "chief"), spec.tasks[0].host)
    if spec.pool is None and spec.is_local(chief) and not os.path.isabs(os.path.expanduser(given)):
        given = os.path.abspath(given)
    data = {**spec.model_dump(exclude_unset=True), "checkpoint": {"dir": given}}
    return located(spec_from_dict(data, source=f"{args.spec} with --checkpoint-dir"),
                   _base_dir(spec))


def cmd_validate(args: argparse.Namespace) -> int:
    from launcher.backends import engine_module

    spec = _load(args.spec)
    if problems := _local_problems(spec, args):
        for problem in problems:
            print(f"{args.spec}: {problem}", file=sys.stderr)
        return 2
    print(f"{args.spec}: OK ({engine_module(spec.engine).size(spec)})")
    from launcher.spec.loading import relative_paths

    fields = list(dict.fromkeys(  # hosts.node-a.identity_file, hosts.node-b...: hosts.*.
        f"hosts.*.{f.rsplit('.', 1)[1]}" if f.startswith("hosts.") else f
        for f in relative_paths(spec)))
    if script := "entrypoint.script" in fields:
        fields.remove("entrypoint.script")
    if fields:  # said where it matters: the spec has some
        print(f"{args.spec}: relative paths start at {_base_dir(spec)}, the spec file's "
              f"directory: {', '.join(fields)}" + (" (entrypoint.script at workdir)" if script
                                                    else ""))
    return 0


def _local_problems(spec: ClusterSpec, args: argparse.Namespace) -> list[str]:
    """The spec's hosts that are this machine: an interpreter or a script that is not here."""
    if spec.engine not in ("local", "ssh"):  # a Slurm allocation's nodes are not known yet
        return []
    from launcher.cli.start import planner_for
    from launcher.preflight.local_files import local_problems

    backend = _engine(spec, args)
    try:
        return local_problems(planner_for(spec, backend, "", _base_dir(spec)).preview())
    finally:
        backend.close()


def _engine(spec: ClusterSpec, args: argparse.Namespace) -> Backend:
    from launcher.backends import create_backend
    from launcher.cli.start import engine_options

    return create_backend(spec, engine_options(args, base_dir=_base_dir(spec)))


def cmd_plan(args: argparse.Namespace) -> int:
    from launcher.cli.start import planner_for
    from launcher.plan.ports import PortAllocator, port_seed
    from launcher.plan.view import plan_json, plan_text
    from launcher.run.directory import default_run_dir

    spec = _load(args.spec)
    backend = _engine(spec, args)
    try:
        planner = planner_for(spec, backend, str(default_run_dir(spec.name).absolute()),
                              _base_dir(spec))
        with PortAllocator(seed=port_seed(spec.name)) as allocator:
            wanted = planner.ports_to_allocate
            launch_plan = planner.plan(0, dict(zip(wanted, allocator.allocate(len(wanted)),
                                                   strict=True)))
        print(plan_json(launch_plan, spec) if args.json else
              plan_text(launch_plan, spec.health, planner.pool))
        if not args.json and (extra := backend.plan_lines(launch_plan)):
            print("\n".join(extra))
    finally:
        backend.close()
    return 0


def cmd_preflight(args: argparse.Namespace) -> int:
    from launcher.cli.start import planner_for
    from launcher.preflight.view import print_report

    spec = _load(args.spec)
    backend = _engine(spec, args)
    try:
        report = backend.probe(planner_for(spec, backend, "", _base_dir(spec)).preview())
    finally:
        backend.close()
    print_report(report, sys.stdout)
    return 0 if report.ok else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    import json

    from launcher.backends.engine import ProbesHosts
    from launcher.cli.start import planner_for
    from launcher.doctor.run import run_doctor
    from launcher.doctor.view import print_report, report_dict

    spec = _load(args.spec)
    backend = _engine(spec, args)
    try:
        if not isinstance(backend, ProbesHosts):
            raise UsageError(f"tfcluster doctor: the {backend.name} engine cannot run a "
                             "program on its hosts")
        launch_plan = planner_for(spec, backend, "", _base_dir(spec)).preview()
        report = run_doctor(launch_plan, backend.probe_runner(launch_plan))
    finally:
        backend.close()
    if args.json:
        print(json.dumps(report_dict(report), indent=2))
    else:
        print_report(report, sys.stdout)
    return 0 if report.ok else 1


def _with_early_agent(verb: Callable[[argparse.Namespace, EarlyAgent], int],
                      args: argparse.Namespace) -> int:
    """Run ``verb`` with a local agent that starts now, while tfcluster imports and plans
    (:mod:`launcher.backends.early_agent`); ended if no local agent took it. The garbage
    collector waits meanwhile: start-up allocates much and frees almost nothing (the
    composition root freezes what it built and turns it back on before the job loop)."""
    from launcher.backends.early_agent import EarlyAgent

    early = EarlyAgent(sys.executable)
    gc.disable()
    try:
        return verb(args, early)
    finally:
        gc.enable()
        early.discard()


def cmd_run(args: argparse.Namespace) -> int:
    return _with_early_agent(_run, args)


def _run(args: argparse.Namespace, early: EarlyAgent) -> int:
    if args.resume is not None:
        return _resume(args, early)
    if args.spec is None:
        raise UsageError("tfcluster run: give a SPEC, or --resume RUN_DIR to continue a run")
    from launcher.cli.python_command import path_python_note

    spec = _load_for_run(args)
    note = path_python_note(spec)
    return _run_new(spec, args, early, [note] if note else [])


def _run_new(spec: ClusterSpec, args: argparse.Namespace, early: EarlyAgent,
             notes: list[str]) -> int:
    """A new run of ``spec``: its first tasks launched before the job machinery is imported, when
    they all run here (:mod:`launcher.cli.start`)."""
    from launcher.cli.start import launch_first

    first = launch_first(spec, args, early)
    early.probe.discard()  # not needed past this machine's check
    from launcher.cli.compose import run_job

    return run_job(spec, args, notes=notes, early=early, first=first).exit_code


def _resume(args: argparse.Namespace, early: EarlyAgent) -> int:
    """``tfcluster run --resume RUN_DIR`` (see :mod:`launcher.job.resume`)."""
    from pathlib import Path

    from launcher.cli.compose import run_job
    from launcher.cli.start import check_resumed_hosts
    from launcher.job.resume import open_resume

    early.probe.discard()  # the resumed run's check starts its own
    resumption = open_resume(Path(args.resume), given=_load_for_run(args) if args.spec else None,
                             checkpoint_dir=args.checkpoint_dir, run_dir_flag=args.run_dir)
    for note in resumption.notes:
        print(f"tfcluster: {note}", file=sys.stderr)
    if resumption.done is not None:
        print(f"tfcluster: {resumption.done}", file=sys.stderr)
        return 0
    check_resumed_hosts(resumption, args)
    print(f"tfcluster: {resumption.headline()}", file=sys.stderr)
    return run_job(resumption.spec, args, resumed=resumption, early=early).exit_code


def cmd_drill(args: argparse.Namespace) -> int:
    from launcher.cli.drill_verb import cmd_drill as drill

    return drill(args, _load_for_run)


def local_spec_data(args: argparse.Namespace) -> dict[str, Any]:
    """The spec that ``tfcluster local`` runs, as data (validated like a file would be)."""
    from launcher.cli.python_command import python_entrypoint

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
        entrypoint = python_entrypoint(command) or {"command": command}
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
    if args.startup_concurrency is not None:
        data["startup_concurrency"] = args.startup_concurrency
    return data


def cmd_local(args: argparse.Namespace) -> int:
    return _with_early_agent(_local, args)


def _local(args: argparse.Namespace, early: EarlyAgent) -> int:
    from launcher.spec.limits import MAX_TASKS, TASK_LIMIT_REASON
    from launcher.spec.loading import spec_from_dict

    if not 1 <= args.num_tasks <= MAX_TASKS:
        raise UsageError(f"tfcluster local: -n must be between 1 and {MAX_TASKS} "
                         f"({TASK_LIMIT_REASON})")
    data = local_spec_data(args)
    spec = spec_from_dict(data, source="tfcluster local")
    from launcher.cli.local_defaults import checkpoints_in_run_dir, fault_tolerance_note
    from launcher.cli.python_command import interpreter_note

    python_note = None if args.module else interpreter_note(args.command)
    if args.checkpoint_dir:
        notes = [note for note in (python_note, fault_tolerance_note(spec)) if note]
        return _run_new(spec, args, early, notes)
    with checkpoints_in_run_dir(data, args) as spec:
        notes = [note for note in (python_note, fault_tolerance_note(spec)) if note]
        return _run_new(spec, args, early, notes)


def cmd_submit(args: argparse.Namespace) -> int:
    from launcher.cli.submit_verb import cmd_submit as submit

    return submit(args)


def _run_dir_or_latest(given: str | None, verb: str) -> Path:
    """``RUN_DIR`` as given, else the latest run under ``runs/`` (said in one line)."""
    from pathlib import Path

    from launcher.output.latest_run import latest_run

    if given is not None:
        return Path(given)
    latest = latest_run(verb)
    print(f"tfcluster: the latest run: {latest} (give RUN_DIR for another)", file=sys.stderr)
    return latest


def cmd_status(args: argparse.Namespace) -> int:
    from launcher.output.run_status import status_lines

    for line in status_lines(_run_dir_or_latest(args.run_dir, "status")):
        print(line)
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from launcher.output.browse import follow_log, log_path, print_log
    from launcher.output.latest_run import looks_like_task

    given, task = args.run_dir, args.task
    if given is not None and task is None and looks_like_task(given):
        given, task = None, given  # ``tfcluster logs chief``: the latest run's chief
    run_dir = _run_dir_or_latest(given, "logs")
    args.task = task
    if not args.follow:
        print_log(log_path(run_dir, args.task, args.attempt)[0], sys.stdout)
        return 0
    try:
        follow_log(run_dir, args.task, args.attempt, sys.stdout)
    except KeyboardInterrupt:
        return 130
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from launcher.cli.schema_verb import cmd_schema as schema

    return schema(args)


def cmd_completion(args: argparse.Namespace) -> int:
    from launcher.cli.completion import cmd_completion as completion
    from launcher.cli.parser import build_parser

    return completion(args, build_parser())


COMMANDS = {"status": cmd_status, "logs": cmd_logs, "schema": cmd_schema,
            "completion": cmd_completion,
            "run": cmd_run, "local": cmd_local, "plan": cmd_plan, "validate": cmd_validate,
            "drill": cmd_drill, "preflight": cmd_preflight, "submit": cmd_submit,
            "doctor": cmd_doctor}
