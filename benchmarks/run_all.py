"""Every benchmark in one run, published as one Markdown file: the machine, the exact commands, and
each target as a ratio of figures measured in this same run.

Run it with the project's interpreter (the tasks use the same one)::

    .venv/bin/python benchmarks/run_all.py [--quick] [--no-tf] [--skip-ssh] [--out benchmarks/RESULTS.md]

1. launch overhead: ``tfcluster local -n N`` until every task runs, against a bare ``Popen`` loop,
   N = 1, 8, 64, 256, the same loop paced to the CPUs, the agent alone given the same launch, and
   the least coordinator that only validates, plans and sends it (``launch_overhead.py``);
2. failure detection, task death -> the coordinator knows (``task_failed.detection_latency_ms``) and
   end to end from the kill, by ``tfcluster drill --fault kill`` of a trivial 2-task job (the fake
   trainer), locally and over SSH to a throwaway sshd on 127.0.0.1 (``ssh_host.py``), plus a task's
   own ``os._exit`` -> ``task_failed`` (``exit_detection.py``);
3. restart latency of those drills (``restart.backoff_s: 0``): death -> every task of the next
   attempt started, and their recovery (death -> first step after the restart) broken down into
   detect, stop, plan, spawn, import and first step (``recovery.py``);
4. recovery cold vs warm (``restart.warm_spares: true``, when ``tfcluster validate`` accepts it:
   ``warm_spares.py``) for the fake trainer and for the digits example (TensorFlow), and for a
   plain MWMS script killed 8, 12, 20 and 33 s after its start (``early_kills.py``);
5. the coordinator's CPU and RSS while it watches 64 and 256 idle tasks (``coordinator_load.py``);
6. training throughput of digits, with tfcluster's worker helpers and without (``throughput.py``,
   TensorFlow).

``--no-tf`` skips the TensorFlow parts (digits in 4, and 6), ``--skip-ssh`` the SSH ones, and
``--quick`` runs every part with smoke-test sizes (N = 1, 8 for launches, a few runs each, a 3 s
idle window): figures not to quote. The file says what was skipped and why.

Every process started carries a marker env var (``BENCH_RUN_ALL_MARKER``, unique per invocation);
psutil checks after every run and at the end that none is left (sshd sessions too), and kills any
that is. Temporary directories are removed. Exit code 0 when every part was measured (a missed
target is a result, not an error), 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

import coordinator_load
import early_kills
import exit_detection
import launch_overhead
import recovery_measure
import recovery_workloads
import throughput
import warm_spares
from common import REPO, CommandLog, Tfcluster, default_tfcluster, loadavg, new_marker, progress
from machine import compile_bytecode
from report import (
    DETECTION,
    LAUNCH,
    LOAD,
    LOCAL,
    SSH,
    THROUGHPUT,
    WARM,
    WARM_SPARES,
    Measured,
    RunInfo,
    Sizes,
    render,
)
from ssh_host import SshdUnavailableError, SshHost, throwaway_sshd
from targets import EARLY_KILL_AT_S, IDLE_N, LAUNCH_N

MARKER_ENV = "BENCH_RUN_ALL_MARKER"
DEFAULT_OUT = REPO / "benchmarks" / "RESULTS.md"

FULL = Sizes(launch_sizes=(1, 8, LAUNCH_N, 256), launch_repeats=5, exit_detections=10, drills=20,
             ssh_drills=10, tf_drills=5, idle_sizes=(IDLE_N, 256), idle_window_s=20.0,
             rate_steps=2000, rate_repeats=6)
QUICK = Sizes(launch_sizes=(1, 8), launch_repeats=1, exit_detections=3, drills=3, ssh_drills=2,
              tf_drills=1, idle_sizes=(IDLE_N,), idle_window_s=3.0, rate_steps=600,
              rate_repeats=1)


def trivial_job() -> recovery_workloads.Workload:
    """Killed at step 25 of 80: the kill lands on the first report at or past it (reports go out
    4 times a second, 12 of these steps), and under load later still; the restart must find
    steps left to train (with 40 steps, a kill past step 40 left attempt 1 nothing to report)."""
    return recovery_workloads.fake_workload(workers=2, steps=80, checkpoint_every=10, at_step=25,
                                            key="trivial")


def digits_job(quick: bool) -> recovery_workloads.Workload:
    if quick:
        return recovery_workloads.digits_workload(steps=120, checkpoint_every=30, at_step=70)
    # The fault comes once the spares are ready: they are filled at the first step and import
    # TensorFlow on what the training leaves of the 2 cores, ~10 s. With the helpers costing
    # nothing per step (issue 26) digits trains ~200 steps/s here: 3000 steps take ~15 s (an
    # earlier fault, while the spares still import, is what early_kills.py measures).
    return recovery_workloads.digits_workload(steps=3600, checkpoint_every=600, at_step=3000)


# --- measuring ----------------------------------------------------------------------------------


def attempt(measured: Measured, heading: str, what: str, step: Callable[[], None]) -> None:
    """Run one measuring step; if it fails, say so under ``heading`` and go on with the next."""
    progress(f"--- {what}")
    try:
        step()
    except Exception as exc:  # a part that cannot be measured must not stop the others
        traceback.print_exc()
        measured.failed = True
        measured.note(heading, f"- **{what}: could not be measured**: {type(exc).__name__}: {exc}")


def variants(cli: Tfcluster, w: recovery_workloads.Workload,
             warm: warm_spares.Probe | None) -> list[recovery_workloads.Variant]:
    """Cold, and when this build has them, with warm spares that import ``w.heavy_import``."""
    cold = recovery_workloads.Variant(LOCAL, cli)
    if warm is None or not warm.available:
        return [cold]
    overrides = warm.overrides(w.heavy_import)
    return [cold, recovery_workloads.Variant(WARM, cli, overrides=lambda: overrides)]


def ssh_variant(cli: Tfcluster, host: SshHost, workers: int) -> recovery_workloads.Variant:
    return recovery_workloads.Variant(SSH, cli.with_env(host.cli_env()),
                                      overrides=lambda: host.spec_overrides(workers),
                                      check_after=host.check_no_sessions)


def measure_kills(m: Measured, cli: Tfcluster, quick: bool, tmp: Path) -> None:
    """A plain MWMS script killed at a few moments, cold and warm (only at 12 s with --quick)."""
    moments = (EARLY_KILL_AT_S,) if quick else early_kills.MOMENTS_S
    keep = Path(tempfile.gettempdir()) / f"tfcluster-early-kill-outliers-{os.getpid()}"
    m.early_kills = early_kills.measure(cli, moments, early_kills.RUNS, tmp, keep=keep)


def measure_all(cli: Tfcluster, sizes: Sizes, args: argparse.Namespace, tmp: Path) -> Measured:
    """Every part in turn, each on its own: one that fails is noted and the next one runs."""
    m = Measured()

    def launch() -> None:
        m.launch = launch_overhead.measure_launch(cli, sizes.launch_sizes, sizes.launch_repeats,
                                                  tmp)

    def probe() -> None:
        m.warm = warm_spares.probe(cli, tmp)

    trivial = trivial_job()

    def local_drills() -> None:
        warm = m.warm
        if warm is not None and warm.available and not warm.preload:
            # its spares would import the build's default, perhaps TensorFlow: not for this job
            m.note(WARM_SPARES, "- fake trainer with warm spares: not measured (this build "
                   "cannot say what spares import: no `entrypoint.preload`)")
            warm = None
        m.local = recovery_measure.measure(trivial, variants(cli, trivial, warm), sizes.drills, 0.0,
                                           tmp=tmp, cold=False)

    def own_exits() -> None:
        m.exit_detection = exit_detection.measure_detection(
            cli, sizes.exit_detections, tmp, 0.5, errors=m.exit_detection_errors)

    def ssh_drills() -> None:
        try:
            with throwaway_sshd(tmp) as host:
                m.ssh = recovery_measure.measure(trivial, [ssh_variant(cli, host, 2)],
                                                 sizes.ssh_drills, 0.0, tmp=tmp, cold=False)
        except SshdUnavailableError as exc:
            m.note(DETECTION, f"- over SSH: not measured: {exc}")

    def digits() -> None:
        w = digits_job(args.quick)
        m.digits = recovery_measure.measure(w, variants(cli, w, m.warm), sizes.tf_drills, 0.0,
                                            tmp=tmp, cold=False)
        with contextlib.suppress(subprocess.CalledProcessError):
            m.tf_import_s = recovery_measure.time_tf_import(1)[0]

    def load() -> None:
        m.load = coordinator_load.measure(cli, sizes.idle_sizes, sizes.idle_window_s, tmp,
                                          errors=m.load_errors)

    def rates() -> None:
        m.rates = throughput.measure(cli, sizes.rate_steps, sizes.rate_repeats, tmp)

    attempt(m, LAUNCH, "launch overhead", launch)
    attempt(m, WARM_SPARES, "warm spares probe (tfcluster validate)", probe)
    attempt(m, DETECTION, "drills of the trivial 2-task job, local", local_drills)
    attempt(m, DETECTION, "failure detection from the task's own exit", own_exits)
    if args.skip_ssh:
        m.note(DETECTION, "- over SSH: skipped (--skip-ssh)")
    else:
        attempt(m, DETECTION, "drills of the trivial 2-task job over SSH", ssh_drills)
    if args.no_tf:
        m.note(WARM_SPARES, "- digits (TensorFlow): skipped (--no-tf)")
        m.note(THROUGHPUT, "- skipped (--no-tf): this part needs TensorFlow")
    else:
        attempt(m, WARM_SPARES, "digits drills (TensorFlow)", digits)
        attempt(m, WARM_SPARES, "a plain MWMS script killed early (TensorFlow)",
                lambda: measure_kills(m, cli, args.quick, tmp))
    attempt(m, LOAD, "coordinator load with idle tasks", load)
    if not args.no_tf:
        attempt(m, THROUGHPUT, "digits throughput (TensorFlow)", rates)
    errors = [r.errors for r in (*m.local, *m.ssh, *m.digits)] + [m.exit_detection_errors,
                                                                   m.load_errors]
    errors += [r.errors for r in m.launch] + [r.errors for r in m.rates] \
        + [k.errors for k in m.early_kills]
    m.failed = m.failed or any(errors)
    return m


def invocation(args: argparse.Namespace) -> str:
    return shlex.join([os.path.relpath(sys.executable, REPO), os.path.relpath(__file__, REPO),
                       *args.argv])


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke-test sizes (N = 1, 8 launches, a few runs of each, a 3 s idle "
                        "window): checks that everything runs, not figures to quote")
    parser.add_argument("--no-tf", action="store_true",
                        help="skip the TensorFlow parts (digits recovery, throughput)")
    parser.add_argument("--skip-ssh", action="store_true", help="skip the SSH parts")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="where to write the report (default benchmarks/RESULTS.md)")
    parser.add_argument("--tfcluster", type=shlex.split, default=default_tfcluster(),
                        help="how to run tfcluster (default: the console script beside this python)")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def exit_on_sigterm() -> None:
    """SIGTERM ends the run like Ctrl-C does: through every ``finally`` (marked processes killed,
    sshd stopped, temporary directories removed), without a report."""
    def handler(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    exit_on_sigterm()
    sizes = QUICK if args.quick else FULL
    marker = new_marker()
    bytecode = compile_bytecode(REPO)
    load_before = loadavg()
    began, started = datetime.datetime.now().astimezone(), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tfcluster-run-all-") as tmp:
        commands = CommandLog(root=Path(tmp), marker=marker, aliases={
            launch_overhead.STAMP_CODE: '"$STAMP_CODE"', exit_detection.FAIL_CODE: '"$FAIL_CODE"'})
        cli = Tfcluster(tuple(args.tfcluster), MARKER_ENV, marker, commands)
        progress(f"tfcluster: {shlex.join(args.tfcluster)}; marker {MARKER_ENV}={marker}; "
                 f"report: {args.out}")
        try:
            measured = measure_all(cli, sizes, args, Path(tmp))
        finally:
            killed = cli.kill_leftovers()
    took = time.monotonic() - started
    run = RunInfo(quick=args.quick, tf=not args.no_tf, ssh=not args.skip_ssh, began=began,
                  took_s=took, load_before=load_before, load_after=loadavg(),
                  invocation=invocation(args), bytecode=bytecode)
    write(args.out, render(measured, commands, marker_var=MARKER_ENV, killed=killed, sizes=sizes,
                           run=run))
    progress(f"wrote {args.out} ({took:.0f} s)")
    return 1 if measured.failed or killed else 0


if __name__ == "__main__":
    sys.exit(main())
