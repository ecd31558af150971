"""``tfcluster submit SPEC --nodes N``: the verb's arguments and help; the engine's
:class:`~launcher.backends.engine.Submitter` writes the job's batch script and submits it
(``--dry-run`` prints the script and submits nothing)."""

from __future__ import annotations

import argparse
import sys

from launcher.errors import UsageError

HELP = ("write an sbatch script that runs the spec on N Slurm nodes (saved and requeued near "
        "its time limit) and submit it")
DESCRIPTION = (
    "Write, next to the run directory, an sbatch script that runs 'tfcluster run SPEC' on N "
    "nodes with --requeue and --signal=B:USR1@GRACE: near the time limit, or on 'scancel --batch "
    "--signal=USR1 JOB', every task gets SIGTERM and saves at an agreed step, and the job "
    "is requeued and continues the same run directory (tfcluster run --resume). Prints the job "
    "id; 'tfcluster status RUN_DIR' shows where the job stands. The spec needs a slurm section.")


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = verbs.add_parser("submit", help=HELP, description=DESCRIPTION)
    sub.add_argument("spec", metavar="SPEC", help="cluster spec (YAML)")
    sub.add_argument("--nodes", type=int, required=True, metavar="N",
                     help="nodes to allocate (the tasks' nodes plus placement.spares)")
    sub.add_argument("--time", metavar="LIMIT", help="sbatch --time (e.g. 2:00:00)")
    sub.add_argument("--partition", metavar="NAME", help="sbatch --partition")
    sub.add_argument("--account", metavar="NAME", help="sbatch --account")
    sub.add_argument("--grace", type=int, default=120, metavar="S",
                     help="seconds before the time limit at which the job saves and requeues "
                     "(default 120)")
    sub.add_argument("--run-dir", metavar="DIR",
                     help="run directory, kept across requeues (default runs/<job>)")
    sub.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                     help="another sbatch option for the script, e.g. --sbatch-arg=--qos=high")
    sub.add_argument("--dry-run", action="store_true",
                     help="print the script; write and submit nothing")


def cmd_submit(args: argparse.Namespace) -> int:
    # imported here: the parser imports this module for add_parser, and every verb builds it
    from launcher.backends import submitter_for
    from launcher.spec.loading import load_spec

    spec = load_spec(args.spec)
    submitter = submitter_for(spec)
    if submitter is None:
        raise UsageError(f"tfcluster submit: {args.spec} has no slurm section: add "
                         "'slurm: {}' to place its tasks on Slurm nodes")
    request = submitter.dryrun(spec, args.spec, vars(args))
    if args.dry_run:
        print(submitter.show(request), end="")
        return 0
    job_id = submitter.schedule(request)
    print(job_id)
    print(f"tfcluster: submitted job {job_id} ({request.script}); follow it with: tfcluster "
          f"status {request.run_dir}", file=sys.stderr)
    return 0
