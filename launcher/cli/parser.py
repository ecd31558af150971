"""The ``tfcluster`` argument parser: every verb and option, with the help a user reads."""

from __future__ import annotations

import argparse

from launcher.ssh.deadline import DEFAULT_CONNECT_TIMEOUT_S
from worker.wire.version import TFCLUSTER_VERSION

_DESCRIPTION = """\
Launch TensorFlow MultiWorkerMirroredStrategy jobs on a cluster described by a YAML spec (or on a
cluster simulated on this machine), watch every task, and stop them all cleanly when one fails.

examples:
  tfcluster validate cluster_specs/local-2workers.yaml
  tfcluster plan cluster_specs/local-2workers.yaml
  tfcluster preflight my-cluster.yaml          # can every host run its part? (SSH, python, ports)
  tfcluster doctor my-cluster.yaml             # how fast are its links, hosts and storage?
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
    parser.add_argument("--version", action="version", version=f"tfcluster {TFCLUSTER_VERSION}")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="COMMAND")

    run = verbs.add_parser("run", help="run the job of a spec to completion",
                           usage="tfcluster run (SPEC | --resume RUN_DIR) [options]",
                           description="Run the job described by SPEC. Exits 0 when every task "
                           "exits 0, otherwise with the root-cause task's exit code "
                           "(128+N for signal N). With --resume RUN_DIR, continue a job whose "
                           "tfcluster died or was stopped: same job, same run directory, the spec "
                           "stored there (RUN_DIR/spec.json), a new attempt resuming from the "
                           "latest complete chief checkpoint; restarts already used stay used, "
                           "the loss of tfcluster itself is not counted. A job that already "
                           "succeeded is not run again (exit 0).")
    run.add_argument("spec", metavar="SPEC", nargs="?", help="cluster spec (YAML)")
    run.add_argument("--resume", metavar="RUN_DIR",
                     help="continue the job of this run directory (no SPEC needed)")
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
                       help="the chief's checkpoint directory (TFCLUSTER_CHECKPOINT_DIR; "
                       "default: checkpoints/ in the run directory)")
    local.add_argument("--grace-period", type=float, metavar="S",
                       help="seconds between TERM and KILL when stopping tasks (default: "
                       "health.grace_period_s's default)")
    local.add_argument("--hang-timeout", type=float, metavar="S",
                       help="a task that reported steps but no new one for S seconds is hung "
                       "(default: off; tasks report steps with worker.report)")
    local.add_argument("--startup-timeout", type=float, metavar="S",
                       help="a task that reports no step within S seconds is stuck (default: off)")
    local.add_argument("--startup-concurrency", type=int, metavar="K",
                       help="start at most K tasks at a time, each until its interpreter is up "
                       "(default: this machine's CPUs; 0: all at once)")
    local.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD",
                       help="command to run (after --)")
    _run_options(local, remote=False)

    drill = verbs.add_parser(
        "drill", help="hurt a job on purpose (faults, or a drill file of scenarios); report",
        description="Run the job of SPEC like 'run' and inject each --fault ACTION:TARGET[:TRIGGER]"
        " once, when due: actions kill term stop crash partition corrupt-checkpoint "
        "kill-coordinator; targets chief worker:N ps:N evaluator:0 random host:NAME all (latest for "
        "corrupt-checkpoint, none for kill-coordinator); triggers at-step=N after=SECONDS random "
        "(seeded). lose-host:NAME[:TRIGGER] takes a host away for good (a network-namespace "
        "host's link, a Slurm node: drained, its agent step killed; root only) until "
        "heal:NAME:after=SECONDS, counted from the loss, or the drill's end. Or run every "
        "scenario of a drill file (SUITE.yaml). Writes drill.json, drill.md and drill.png into "
        "the run directory and prints the table; exits non-zero if a fault was never injected, "
        "a job failed, or a result differs from the baseline (not compared when the job ran at "
        "another size).")
    drill.add_argument("spec", metavar="SPEC|SUITE",
                       help="cluster spec (YAML), or a drill file of scenarios")
    drill.add_argument("--fault", action="append", metavar="FAULT",
                       help="ACTION:TARGET[:TRIGGER], e.g. kill:worker:1:at-step=100 (repeatable)")
    drill.add_argument("--task", help="shorthand: the task to hurt, e.g. worker:1 (with --at-step)")
    drill.add_argument("--at-step", type=int, metavar="N",
                       help="shorthand: inject --fault ACTION into --task at step N")
    drill.add_argument("--seed", type=int, help="seed of random targets and triggers (default 0, "
                       "or the drill file's)")
    drill.add_argument("--random-horizon", type=int, metavar="N",
                       help="random triggers draw a step in 1..N (default 100)")
    drill.add_argument("--baseline", action="store_true",
                       help="run the job once without faults first; every result must equal its")
    drill.add_argument("--baseline-from", metavar="RUN_DIR",
                       help="compare with the result of this earlier run instead")
    drill.add_argument("--in-child", action="store_true", help=argparse.SUPPRESS)
    drill.add_argument("--checkpoint-dir", metavar="DIR",
                       help="use DIR as the chief's checkpoint directory instead of the spec's")
    _run_options(drill)

    show = verbs.add_parser("plan", help="print exactly what 'run' would start",
                            description="Print, for every task, its host, TF_CONFIG, argv, "
                            "env and cwd. Secrets (secret-looking env names, credentials in URLs and "
                            "options) are masked.")
    show.add_argument("spec", metavar="SPEC", help="cluster spec (YAML)")
    show.add_argument("--json", action="store_true", help="machine-readable output")

    _module_verbs(verbs)

    check = verbs.add_parser("validate", help="check a spec; exit 2 listing every problem",
                             description="Check SPEC without starting or contacting anything: its "
                             "YAML, every field (unknown ones with a did-you-mean), and the rules "
                             "across them (one chief, known hosts, no port used twice). Exits 0 "
                             "when it is valid, else 2 with one line per problem naming the "
                             "field's path.")
    check.add_argument("spec", metavar="SPEC", help="cluster spec (YAML)")

    ready = verbs.add_parser(
        "preflight", help="check every host of a spec at once (SSH, python, worker, ports...)",
        description="Check, for every host of SPEC at the same time, everything 'run' needs "
        "there: SSH reachable, host key known, login works, python and the worker package "
        "(tfcluster's, the coordinator's version), the TensorFlow version (the same on every "
        "host), the tasks' ports free, and the chief's "
        "checkpoint directory writable. Prints one table; exits 0 when every host is ready, "
        "1 otherwise. 'run' does this by itself for specs with remote hosts.")
    ready.add_argument("spec", metavar="SPEC", help="cluster spec (YAML)")
    _ssh_options(ready)

    doctor = verbs.add_parser(
        "doctor", help="measure the hosts of a spec: links, memory, CPUs, clocks, storage",
        description="Measure, as one job of SPEC would use them, every host: each pair's round "
        "trip and throughput (each way) between the addresses of their tasks' ports, each host's "
        "free memory, usable CPUs and clock offset from this machine, and the checkpoint "
        "directory's write and read speed from the hosts that read it. Names the slowest link "
        "and the slowest host against the median. Runs tfcluster's own program on each host "
        "(no TensorFlow) for a few seconds. Exits 0 when everything could be measured, 1 "
        "otherwise (one line per host that could not).")
    doctor.add_argument("spec", metavar="SPEC", help="cluster spec (YAML)")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    _ssh_options(doctor)
    _browse_verbs(verbs)
    return parser


def _module_verbs(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The verbs whose options are defined in their own module: ``submit``, ``schema``,
    ``completion``."""
    from launcher.cli.completion import add_parser as add_completion
    from launcher.cli.schema_verb import add_parser as add_schema
    from launcher.cli.submit_verb import add_parser as add_submit

    add_submit(verbs)
    add_schema(verbs)
    add_completion(verbs)


def _browse_verbs(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``status`` and ``logs``: a run directory read back (launcher.output.browse)."""
    where = verbs.add_parser(
        "status", help="where a job stands, or how it ended, from its run directory",
        description="Print from RUN_DIR alone (events.jsonl, summary.json) whether the job runs, "
        "succeeded or failed; every attempt with its root cause, steps reached, steps lost and "
        "recovery time; each task's step, steps/s, CPU and RSS; the slowest task, stragglers and "
        "memory warnings. Works for a running job and for one long finished. Without RUN_DIR: "
        "the latest run under runs/ here (said on stderr).")
    where.add_argument("run_dir", metavar="RUN_DIR", nargs="?",
                       help="a job's run directory (default: the latest under runs/)")
    logs = verbs.add_parser(
        "logs", help="print or follow a task's log from a run directory",
        usage="tfcluster logs [RUN_DIR] [TASK] [--attempt N] [-f]",
        description="Print RUN_DIR/attempt-<N>/<type>-<index>.log of TASK (default: the chief, "
        "or the first worker) in the latest attempt (or --attempt N). With -f, keep printing what "
        "is added until the job ends, moving on to the next attempt's log when the job restarts "
        "(unless --attempt is given). Without RUN_DIR: the latest run under runs/ here (said on "
        "stderr), e.g. 'tfcluster logs chief'.")
    logs.add_argument("run_dir", metavar="RUN_DIR", nargs="?",
                      help="a job's run directory (default: the latest under runs/)")
    logs.add_argument("task", metavar="TASK", nargs="?",
                      help="chief, chief:0, worker:1 (or worker-1); a bare type when the job has "
                      "one task of it")
    logs.add_argument("--attempt", type=int, metavar="N", help="attempt number (0-based)")
    logs.add_argument("-f", "--follow", action="store_true", help="follow until the job ends")


def _ssh_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--accept-new-host-keys", action="store_true",
                        help="trust the key of a host seen for the first time and record it in "
                        "the known_hosts file in use (like StrictHostKeyChecking=accept-new); "
                        "a changed key is always refused")
    parser.add_argument("--connect-timeout", type=seconds, default=DEFAULT_CONNECT_TIMEOUT_S,
                        metavar="S",
                        help="seconds to wait for each SSH connection, and for each host's "
                        f"preflight (default {DEFAULT_CONNECT_TIMEOUT_S:g})")


def _run_options(parser: argparse.ArgumentParser, remote: bool = True) -> None:
    """The options of every verb that runs a job; ``remote``: its hosts may be reached over SSH
    (not so for ``local``, whose tasks all run on this machine)."""
    parser.add_argument("--run-dir", metavar="DIR",
                        help="where events.jsonl, task logs and summary.json go "
                        "(default runs/<job>-<timestamp>)")
    parser.add_argument("--quiet", action="store_true",
                        help="do not echo task output (it still goes to the run directory)")
    parser.add_argument("--verbose", action="store_true",
                        help="echo every task line, TensorFlow's start-up noise included, and "
                        "the survivors' output after a failure (the task logs always have all)")
    if remote:
        _ssh_options(parser)
