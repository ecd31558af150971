"""``tfcluster submit SPEC --nodes N``: write the job's sbatch script and submit it (see
:mod:`launcher.slurm.sbatch`); ``--dry-run`` prints the script and submits nothing."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

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
    sub.add_argument("spec", metavar="SPEC")
    sub.add_argument("--nodes", type=int, required=True, metavar="N",
                     help="nodes to allocate (the tasks' nodes plus slurm.spare_nodes)")
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
    from launcher.plan.slurm_planner import slurm_task_order
    from launcher.slurm.sbatch import BatchRequest, batch_script, submit
    from launcher.spec.loading import load_spec
    from launcher.spec.placement import nodes_needed

    spec = load_spec(args.spec)
    if spec.slurm is None:
        raise UsageError(f"tfcluster submit: {args.spec} has no slurm section: add "
                         "'slurm: {tasks_per_node: 1}' to place its tasks on Slurm nodes")
    need = nodes_needed(spec.slurm, len(slurm_task_order(spec))) + spec.slurm.spare_nodes
    if args.nodes < need:
        raise UsageError(f"tfcluster submit: --nodes {args.nodes} is too few: {args.spec} needs "
                         f"{need} node(s) (tasks / slurm.tasks_per_node + slurm.spare_nodes)")
    if not 1 <= args.grace <= 3600:
        raise UsageError("tfcluster submit: --grace must be between 1 and 3600 seconds")
    if args.grace <= spec.health.grace_period_s:
        raise UsageError(f"tfcluster submit: --grace {args.grace} leaves the tasks no time to "
                         f"save: make it longer than health.grace_period_s "
                         f"({spec.health.grace_period_s:g}s)")
    run_dir = Path(args.run_dir or Path("runs") / spec.name).absolute()
    script = run_dir.parent / f"{run_dir.name}.sbatch"
    request = BatchRequest(spec=str(Path(args.spec).absolute()), run_dir=str(run_dir),
                           script=str(script), job_name=f"tfcluster-{spec.name}",
                           nodes=args.nodes, python=sys.executable, workdir=os.getcwd(),
                           grace_s=args.grace, time=args.time, partition=args.partition,
                           account=args.account, extra=tuple(args.sbatch_arg))
    text = batch_script(request)
    if args.dry_run:
        print(text, end="")
        return 0
    run_dir.mkdir(parents=True, exist_ok=True)
    script.write_text(text)
    job_id = submit(str(script))
    print(job_id)
    print(f"tfcluster: submitted job {job_id} ({script}); follow it with: tfcluster status "
          f"{run_dir}", file=sys.stderr)
    return 0
