"""``tfcluster`` (also ``python -m launcher``): run, local, plan, validate, preflight.

Imports are kept inside the commands so that ``tfcluster --help`` and ``validate`` start fast; no
command ever imports TensorFlow.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from launcher.checkpoints import CheckpointFS
    from launcher.drill import Fault
    from launcher.plan import HostPlan
    from launcher.spec import ClusterSpec

EXIT_BAD_SPEC = 2
FAULT_NAMES = ("kill", "term", "stop")

_DESCRIPTION = """\
Launch TensorFlow MultiWorkerMirroredStrategy jobs on a cluster described by a YAML spec (or on a
cluster simulated on this machine), watch every task, and stop them all cleanly when one fails.

examples:
  tfcluster validate cluster_specs/local-2workers.yaml
  tfcluster plan cluster_specs/local-2workers.yaml
  tfcluster preflight my-cluster.yaml          # can every host run its part? (SSH, python, ports)
  tfcluster run cluster_specs/local-2workers.yaml
  tfcluster local -n 3 --chief -m worker.examples.digits -- --steps 200
  tfcluster local -n 2 -- python3 train.py --epochs 1
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfcluster", description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="COMMAND")

    run = verbs.add_parser("run", help="run the job of a spec to completion",
                           description="Run the job described by SPEC. Exits 0 when every task "
                           "exits 0, otherwise with the root-cause task's exit code "
                           "(128+N for signal N).")
    run.add_argument("spec", metavar="SPEC", help="cluster spec (YAML)")
    run.add_argument("--checkpoint-dir", metavar="DIR",
                     help="use DIR as the chief's checkpoint directory instead of the spec's")
    _run_options(run)

    local = verbs.add_parser(
        "local", help="simulate a cluster of N tasks on this machine, no spec file needed",
        description="Start N tasks of CMD on this machine as one MWMS cluster (localhost ports "
        "are allocated for you). CMD ending in .py runs as a Python script; -m runs a module.",
        usage="tfcluster local -n N [--chief] [options] (-m MODULE [-- ARGS...] | -- CMD [ARGS...])")
    local.add_argument("-n", "--num-tasks", type=int, required=True, metavar="N",
                       help="number of tasks (chief included)")
    local.add_argument("--chief", action="store_true",
                       help="make the first task a 'chief' (otherwise worker 0 is chief)")
    local.add_argument("-m", "--module", help="run this Python module in every task")
    local.add_argument("--name", default="local", help="job name (default: local)")
    local.add_argument("--max-restarts", type=int, default=0, metavar="K",
                       help="restart the whole job up to K times (default 0)")
    local.add_argument("--checkpoint-dir", metavar="DIR",
                       help="the chief's checkpoint directory (TFCLUSTER_CHECKPOINT_DIR)")
    local.add_argument("--grace-period", type=float, default=10.0, metavar="S",
                       help="seconds between TERM and KILL when stopping tasks (default 10)")
    local.add_argument("--hang-timeout", type=float, metavar="S",
                       help="a task that reported steps but no new one for S seconds is hung "
                       "(default: off; tasks report steps with worker.report)")
    local.add_argument("--startup-timeout", type=float, metavar="S",
                       help="a task that reports no step within S seconds is stuck (default: off)")
    local.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD",
                       help="command to run (after --)")
    _run_options(local)

    drill = verbs.add_parser(
        "drill", help="run a spec and hurt one task on purpose; report the recovery",
        description="Run the job of SPEC like 'run' and, the first time TASK reports step N, send "
        "it a fault: kill (SIGKILL, a crash), term (SIGTERM, a preemption notice), stop (SIGSTOP, "
        "a hang; needs health.hang_timeout_s). Prints detection latency, recovery time and steps "
        "lost, computed from events.jsonl.")
    drill.add_argument("spec", metavar="SPEC")
    drill.add_argument("--task", required=True, help="task to hurt, e.g. worker:1")
    drill.add_argument("--at-step", type=int, required=True, metavar="N",
                       help="inject the fault when the task reports step N (or later)")
    drill.add_argument("--fault", choices=sorted(FAULT_NAMES), default="kill")
    drill.add_argument("--checkpoint-dir", metavar="DIR",
                       help="use DIR as the chief's checkpoint directory instead of the spec's")
    _run_options(drill)

    show = verbs.add_parser("plan", help="print exactly what 'run' would start",
                            description="Print, for every task, its host, TF_CONFIG, argv, "
                            "env and cwd. Secret-looking env values are masked.")
    show.add_argument("spec", metavar="SPEC")
    show.add_argument("--json", action="store_true", help="machine-readable output")

    check = verbs.add_parser("validate", help="check a spec; exit 2 listing every problem")
    check.add_argument("spec", metavar="SPEC")

    ready = verbs.add_parser(
        "preflight", help="check every host of a spec at once (SSH, python, worker, ports...)",
        description="Check, for every host of SPEC at the same time, everything 'run' needs "
        "there: SSH reachable, host key known, login works, python and the worker package, the "
        "TensorFlow version (the same on every host), the tasks' ports free, and the chief's "
        "checkpoint directory writable. Prints one table; exits 0 when every host is ready, "
        "1 otherwise. 'run' does this by itself for specs with remote hosts.")
    ready.add_argument("spec", metavar="SPEC")
    _ssh_options(ready)
    return parser


def _ssh_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--accept-new-host-keys", action="store_true",
                        help="trust the key of a host seen for the first time and record it in "
                        "the known_hosts file in use (like StrictHostKeyChecking=accept-new); "
                        "a changed key is always refused")
    parser.add_argument("--connect-timeout", type=float, default=10.0, metavar="S",
                        help="seconds to wait for each SSH connection, and for each host's "
                        "preflight (default 10)")


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", metavar="DIR",
                        help="where events.jsonl, task logs and summary.json go "
                        "(default runs/<job>-<timestamp>)")
    parser.add_argument("--quiet", action="store_true",
                        help="do not echo task output (it still goes to the run directory)")
    _ssh_options(parser)


def _load(path: str) -> ClusterSpec | None:
    from launcher.spec import SpecError, load_spec

    try:
        return load_spec(path)
    except SpecError as exc:
        print(str(exc), file=sys.stderr)
        return None


def cmd_validate(args: argparse.Namespace) -> int:
    spec = _load(args.spec)
    if spec is None:
        return EXIT_BAD_SPEC
    slots = spec.task_slots()
    hosts = {s.host for s in slots}
    print(f"{args.spec}: OK ({len(slots)} task(s) on {len(hosts)} host(s))")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from launcher.plan import plan, ports_to_allocate
    from launcher.plan_view import plan_json, plan_text
    from launcher.ports import PortAllocator
    from launcher.rundir import default_run_dir

    spec = _load(args.spec)
    if spec is None:
        return EXIT_BAD_SPEC
    allocator = PortAllocator()
    try:
        wanted = ports_to_allocate(spec)
        ports = dict(zip(wanted, allocator.allocate(len(wanted)), strict=True))
        launch_plan = plan(spec, attempt=0, run_dir=str(default_run_dir(spec.name).absolute()),
                           ports=ports, local_python=sys.executable, base_dir=os.getcwd(),
                           local_address=local_task_address(spec))
    finally:
        allocator.close()
    print(plan_json(launch_plan) if args.json else plan_text(launch_plan))
    return 0


def _load_for_run(args: argparse.Namespace) -> ClusterSpec | None:
    """The spec with ``--checkpoint-dir`` applied, validated again as a whole."""
    from launcher.spec import SpecError, spec_from_dict

    spec = _load(args.spec)
    if spec is None or not args.checkpoint_dir:
        return spec
    data = {**spec.model_dump(), "checkpoint": {"dir": args.checkpoint_dir}}
    try:
        return spec_from_dict(data, source=f"{args.spec} with --checkpoint-dir")
    except SpecError as exc:
        print(str(exc), file=sys.stderr)
        return None


def cmd_preflight(args: argparse.Namespace) -> int:
    from launcher.preflight import PreflightOptions, preflight_spec
    from launcher.preflight_view import print_report

    spec = _load(args.spec)
    if spec is None:
        return EXIT_BAD_SPEC
    options = PreflightOptions(connect_timeout_s=args.connect_timeout,
                               accept_new_host_keys=args.accept_new_host_keys)
    report = preflight_spec(spec, options, local_python=sys.executable, base_dir=os.getcwd())
    print_report(report, sys.stdout)
    return 0 if report.ok else 1


def cmd_run(args: argparse.Namespace) -> int:
    spec = _load_for_run(args)
    return EXIT_BAD_SPEC if spec is None else _run(spec, args)


def cmd_drill(args: argparse.Namespace) -> int:
    from launcher import drill
    from launcher.events import read_events

    spec = _load_for_run(args)
    if spec is None:
        return EXIT_BAD_SPEC
    if args.task not in {str(s.task) for s in spec.task_slots()}:
        tasks = ", ".join(str(s.task) for s in spec.task_slots())
        print(f"tfcluster drill: no task {args.task!r} in {args.spec} (tasks: {tasks})",
              file=sys.stderr)
        return EXIT_BAD_SPEC
    fault = drill.Fault(task=args.task, at_step=args.at_step, signal=drill.FAULTS[args.fault])
    code, run_dir = _run_job(spec, args, fault)
    if not (run_dir / "events.jsonl").exists():  # the preflight stopped it before it started
        return code
    for line in drill.report(read_events(run_dir / "events.jsonl")).lines():
        print(line)
    return code


def local_spec_data(args: argparse.Namespace) -> dict[str, Any]:
    """The spec that ``tfcluster local`` runs, as data (validated like a file would be)."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.module:
        entrypoint: dict[str, Any] = {"module": args.module, "args": command}
    elif not command:
        raise SystemExit("tfcluster local: give a command after --, or -m MODULE")
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
    data: dict[str, Any] = {
        "name": args.name, "entrypoint": entrypoint, "tasks": tasks,
        "restart": {"max_restarts": args.max_restarts},
        "health": {"grace_period_s": args.grace_period, "hang_timeout_s": args.hang_timeout,
                   "startup_timeout_s": args.startup_timeout},
    }
    if args.checkpoint_dir:
        data["checkpoint"] = {"dir": args.checkpoint_dir}
    return data


def cmd_local(args: argparse.Namespace) -> int:
    from launcher.spec import SpecError, spec_from_dict

    if args.num_tasks < 1:
        print("tfcluster local: -n must be at least 1", file=sys.stderr)
        return EXIT_BAD_SPEC
    try:
        spec = spec_from_dict(local_spec_data(args), source="tfcluster local")
    except SpecError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_SPEC
    return _run(spec, args)


def _run(spec: ClusterSpec, args: argparse.Namespace) -> int:
    return _run_job(spec, args, None)[0]


def _run_job(spec: ClusterSpec, args: argparse.Namespace, fault: Fault | None
             ) -> tuple[int, Path]:

    from launcher.backends.base import Backend
    from launcher.backends.local import LocalBackend
    from launcher.backends.router import HostRouter
    from launcher.console import Console
    from launcher.coordinator import Coordinator, FSForHost, local_fs_only
    from launcher.preflight import has_remote_hosts
    from launcher.preflight_view import check_before_run
    from launcher.rundir import RunDir, default_run_dir
    from launcher.state import JobState
    from launcher.status import PlainStatus, StatusBoard

    run_dir = RunDir(Path(args.run_dir or default_run_dir(spec.name)).absolute())
    if not check_before_run(spec, accept_new_host_keys=args.accept_new_host_keys,
                            connect_timeout_s=args.connect_timeout, local_python=sys.executable,
                            base_dir=os.getcwd(), stream=sys.stderr):
        return 1, run_dir.path
    console = Console(show_task_output=not args.quiet)
    remote: Backend | None = None
    checkpoint_fs: FSForHost = local_fs_only
    if has_remote_hosts(spec):  # paramiko is imported only when a host needs it
        from launcher.backends.ssh import SshBackend
        from launcher.sftp_fs import remote_checkpoint_fs

        ssh = SshBackend(accept_new_host_keys=args.accept_new_host_keys,
                         connect_timeout_s=args.connect_timeout)
        remote = ssh

        def checkpoint_fs(host: HostPlan) -> AbstractContextManager[CheckpointFS | None]:
            return local_fs_only(host) if host.local else remote_checkpoint_fs(ssh, host)

    backend = HostRouter(local=LocalBackend(python=sys.executable), remote=remote)
    board = StatusBoard()
    live = console.interactive and not args.quiet
    listener = board.apply if live else PlainStatus(console, board)
    coordinator = Coordinator(spec, run_dir, backend, console, local_python=sys.executable,
                              base_dir=os.getcwd(), fault=fault, listeners=[listener],
                              local_address=local_task_address(spec),
                              checkpoint_fs=checkpoint_fs)
    previous = {sig: signal.signal(sig, coordinator.interrupt)
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        with console.live(board.table) if live else contextlib.nullcontext():
            result = coordinator.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    attempts = len(result.attempts)
    if result.state is JobState.SUCCEEDED:
        console.say(f"job {spec.name} succeeded ({attempts} attempt(s)); run dir {run_dir.path}")
    else:
        console.error(f"job {spec.name} failed: {result.reason}; exit code {result.exit_code}; "
                      f"run dir {run_dir.path}")
    return result.exit_code, run_dir.path


def local_task_address(spec: ClusterSpec) -> str:
    """How remote tasks reach the tasks on this machine: ``localhost`` for an all-local job,
    else the local address on the route to the first remote host."""
    from launcher.netaddr import address_towards

    remote = [name for name in spec.hosts if not spec.is_local(name)]
    if not remote:
        return "localhost"
    return address_towards(spec.address_of(remote[0])) or "localhost"


COMMANDS = {"run": cmd_run, "local": cmd_local, "plan": cmd_plan, "validate": cmd_validate,
            "drill": cmd_drill, "preflight": cmd_preflight}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return COMMANDS[args.verb](args)


def entry() -> None:
    sys.exit(main())
