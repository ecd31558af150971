"""Recovery time after a task is killed, next to a cold start of the same job.

Run it with the project's interpreter (the tasks use the same one)::

    .venv/bin/python benchmarks/recovery.py [--fake-runs 20] [--tf-runs 3] [--backoff 0.1]

Two workloads, each from a spec that this script writes into a temporary directory (with
``restart.backoff_s`` set by ``--backoff``, 0.1 s by default, instead of the shipped specs' 1.0 s,
``restart.max_restarts: 1``, and a fresh temporary checkpoint directory per run):

- **fake**: ``tests/support/fake_trainer.py`` (no TensorFlow) as a chief and two workers, 100 steps of 0.02 s,
  the chief checkpointing every 10 steps; ``worker:1`` is killed at step 55.
- **digits**: the real TF MWMS example ``python -m worker.examples.digits`` on two workers (as in
  ``cluster_specs/local-2workers.yaml``), 200 steps, checkpoint every 50, ``--deterministic``;
  ``worker:1`` is killed at step 120.

For every run it launches ``tfcluster drill SPEC --task worker:1 --at-step N --fault kill`` and reads
its ``events.jsonl``:

- detection: ``task_failed.detection_latency_ms`` (the agent saw the death -> the coordinator recorded
  it) and end to end ``fault_injected.ts`` -> ``task_failed.observed_at``;
- recovery: ``task_failed.died_at`` -> the first ``task_progress`` with ``first`` in attempt 1, and
  the steps lost (``launcher.drill.figures.fault_figures``), broken down into detect (death ->
  ``task_failed.observed_at``), stop (-> the last ``task_exited`` of attempt 0), plan (->
  ``attempt_started`` of attempt 1: teardown confirmed, checkpoint lookup, policy, backoff), spawn
  (-> every ``task_started``), import (-> every task had imported its heavy module: ``tensorflow``
  for digits) and first step.

Every task starts through ``benchmarks/tasks/timed_entry.py``, which runs the real entrypoint after
noting when it got there and when the heavy module was imported; that is where the import phase
comes from.

``--tf-grace S`` sets the digits spec's ``health.grace_period_s`` (TERM -> KILL of the other tasks;
default 10 as in ``cluster_specs/local-2workers.yaml``) to see what the stop phase costs.

Interleaved with the drills it runs the same job cold, ``tfcluster run SPEC``, and measures from just
before ``Popen`` to the first step of attempt 0 (also split: Popen -> ``job_started`` (coordinator
start) -> ``attempt_started`` -> every task started -> first step). The drills' own attempt 0 gives a
second cold-start figure.

Every process carries a marker env var (``BENCH_RECOVERY_MARKER``, unique per invocation; set in the
CLI's environment and in the spec's ``env``); after every run and at the end psutil checks that none
is left (any that is gets killed and the script exits 1). Temporary directories are removed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from common import CommandLog, Tfcluster, default_tfcluster, loadavg, new_marker, progress
from recovery_measure import measure, time_tf_import
from recovery_report import (
    Results,
    breakdown_table,
    cold_table,
    detection_table,
    error_lines,
    recovery_table,
    setup_lines,
)
from recovery_workloads import Variant, workloads

MARKER_ENV = "BENCH_RECOVERY_MARKER"  # not TFCLUSTER_*: that prefix is reserved in spec env


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--fake-runs", type=int, default=20,
                        help="drills (and as many cold runs) of the fake trainer (default 20)")
    parser.add_argument("--tf-runs", type=int, default=3,
                        help="drills (and as many cold runs) of the TF digits example (default 3)")
    parser.add_argument("--backoff", type=float, default=0.1, metavar="S",
                        help="restart.backoff_s in the specs written here (default 0.1)")
    parser.add_argument("--fake-at-step", type=int, default=55,
                        help="fake trainer: kill worker:1 at this step (default 55 of 100)")
    parser.add_argument("--tf-at-step", type=int, default=120,
                        help="digits: kill worker:1 at this step (default 120 of 200)")
    parser.add_argument("--tf-grace", type=float, default=10.0, metavar="S",
                        help="digits: health.grace_period_s, TERM -> KILL when stopping the other "
                        "tasks (default 10, as in cluster_specs/local-2workers.yaml)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="uncounted fake-trainer cold runs first (default 1)")
    parser.add_argument("--tfcluster", type=shlex.split, default=default_tfcluster(),
                        help="how to run tfcluster (default: the console script beside this python)")
    args = parser.parse_args(argv)
    if args.fake_runs < 0 or args.tf_runs < 0 or args.warmup < 0:
        parser.error("run counts must not be negative")
    if args.backoff < 0 or args.tf_grace < 0:
        parser.error("--backoff and --tf-grace must not be negative")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    marker = new_marker()
    cli = Tfcluster(tuple(args.tfcluster), MARKER_ENV, marker, CommandLog())
    fake, digits = workloads(args.fake_at_step, args.tf_at_step, args.tf_grace)
    progress(f"tfcluster: {shlex.join(args.tfcluster)}; marker {MARKER_ENV}={marker}")
    load_before = loadavg()
    began = time.monotonic()
    all_results: list[Results] = []
    tf_import: list[float] = []
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-recovery-") as tmp:
            if args.fake_runs:
                all_results += measure(fake, [Variant(fake.key, cli)], args.fake_runs,
                                       args.backoff, tmp=Path(tmp), warmup=args.warmup)
            if args.tf_runs:
                all_results += measure(digits, [Variant(digits.key, cli)], args.tf_runs,
                                       args.backoff, tmp=Path(tmp))
                with contextlib.suppress(subprocess.CalledProcessError):
                    tf_import = time_tf_import(1)
    finally:
        killed = cli.kill_leftovers()
    print(f"## tfcluster recovery benchmark ({time.monotonic() - began:.0f} s)")
    print()
    print(f"Host: {os.cpu_count()} CPU(s); load average (1/5/15 min) before {load_before}, "
          f"after {loadavg()}; python {sys.version.split()[0]}")
    print()
    print("\n".join(setup_lines(all_results, args.backoff)))
    print()
    for table in (detection_table, recovery_table, breakdown_table, cold_table):
        print("\n".join(table(all_results)))
        print()
    if tf_import:
        print(f"- reference: `python -c 'import tensorflow'` alone took {tf_import[0]:.2f} s "
              "(after the runs)")
    errors = error_lines(all_results)
    print("\n".join(errors))
    status = 1 if errors else 0
    if killed:
        print(f"- leftover processes: {len(killed)} with {MARKER_ENV} were still running at the "
              f"end and were killed: {killed}")
        status = 1
    else:
        print(f"- leftover processes: none with {MARKER_ENV}={marker} (checked with psutil after "
              "every run and at the end); temporary directories removed")
    return status


if __name__ == "__main__":
    sys.exit(main())
