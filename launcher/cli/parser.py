"""The ``tfcluster`` argument parser: every verb and option, with the help a user reads."""

from __future__ import annotations

import argparse

from launcher.ssh.deadline import DEFAULT_CONNECT_TIMEOUT_S

#: Faults ``tfcluster drill --fault`` can inject (see :data:`launcher.job.drill.FAULTS`).
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


#: Longest time-out the command line accepts, seconds (as for spec durations).
MAX_SECONDS = 7 * 24 * 3600.0


def seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse turns the ValueError into a usage line)."""
    value = float(text)
    if not (0 < value <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds between 0 and {MAX_SECONDS:g}, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
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
    local.add_argument("--grace-period", type=float, metavar="S",
                       help="seconds between TERM and KILL when stopping tasks (default: "
                       "health.grace_period_s's default)")
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
                            "env and cwd. Secrets (secret-looking env names, credentials in URLs and "
                            "options) are masked.")
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
    parser.add_argument("--connect-timeout", type=seconds, default=DEFAULT_CONNECT_TIMEOUT_S,
                        metavar="S",
                        help="seconds to wait for each SSH connection, and for each host's "
                        f"preflight (default {DEFAULT_CONNECT_TIMEOUT_S:g})")


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", metavar="DIR",
                        help="where events.jsonl, task logs and summary.json go "
                        "(default runs/<job>-<timestamp>)")
    parser.add_argument("--quiet", action="store_true",
                        help="do not echo task output (it still goes to the run directory)")
    _ssh_options(parser)
