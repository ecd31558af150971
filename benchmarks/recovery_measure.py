"""The recovery benchmark's measuring: one drill or cold run of a workload through the CLI
(checked, turned into a sample), and ``measure``, the interleaved series of them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from common import REPO, BenchmarkError, CliRun, of, progress, scratch, write_spec
from phases import ColdSample, DrillSample, cold_sample, drill_sample
from recovery_report import Results
from recovery_workloads import Variant, Workload

from launcher.run.events import EventType

LEFTOVER_WAIT_S = 10.0


def check_outcome(run: CliRun, what: str) -> None:
    if run.exit_code != 0:
        raise BenchmarkError(f"{what}: tfcluster exited {run.exit_code}: {run.tail()}")
    if not of(run.events, EventType.JOB_SUCCEEDED):
        raise BenchmarkError(f"{what}: no job_succeeded event")


def run_job(variant: Variant, w: Workload, verb: Sequence[str], backoff_s: float,
            work: Path) -> tuple[CliRun, Path]:
    """Write the spec, run ``tfcluster VERB SPEC ...``, check nothing is left; returns the run
    and the tasks' timing directory."""
    cli = variant.cli
    timing = work / "timing"
    timing.mkdir()
    data = w.spec({cli.marker_var: cli.marker}, backoff_s, timing, variant.overrides())
    title = f"{w.key}, {variant.label}"
    cli.commands.spec(title, data)
    spec = write_spec(work, data)
    args = [verb[0], str(spec), *verb[1:], "--checkpoint-dir", str(work / "checkpoints"),
            "--run-dir", str(work / "run"), "--quiet"]
    try:
        run = cli.run(args, work, timeout_s=w.timeout_s, run_dir=work / "run", cwd=REPO,
                      note=f"spec: {title}")
        cli.check_no_leftovers(LEFTOVER_WAIT_S)
    finally:
        variant.check_after()
    return run, timing


def one_drill(variant: Variant, w: Workload, backoff_s: float, work: Path) -> DrillSample:
    verb = ["drill", "--task", w.task, "--at-step", str(w.at_step), "--fault", "kill"]
    run, timing = run_job(variant, w, verb, backoff_s, work)
    check_outcome(run, "drill")
    return drill_sample(run.events, run.started_at, w.task, timing)


def one_cold(variant: Variant, w: Workload, backoff_s: float, work: Path) -> ColdSample:
    run, timing = run_job(variant, w, ["run"], backoff_s, work)
    check_outcome(run, "cold run")
    if of(run.events, EventType.JOB_RESTARTING):
        raise BenchmarkError("cold run: the job restarted")
    return cold_sample(run.events, run.started_at, timing)


def measure(w: Workload, variants: Sequence[Variant], runs: int, backoff_s: float, *, tmp: Path,
            warmup: int = 0, cold: bool = True) -> list[Results]:
    """``runs`` drills of ``w`` per variant (and as many ``tfcluster run`` cold starts when
    ``cold``), interleaved so that load drifts hit every variant alike."""
    all_results = [Results(w, v.label) for v in variants]
    for index in range(warmup):  # page cache, .pyc: not counted
        with scratch(tmp, f"{w.key}-warmup-") as work:
            try:
                one_cold(variants[0], w, backoff_s, work)
            except BenchmarkError as exc:
                progress(f"{w.key} warm-up {index + 1}: {exc}")
    for index in range(runs):
        for variant, results in zip(variants, all_results, strict=True):
            measure_once(variant, w, backoff_s, results, tmp=tmp,
                         label=f"{variant.label} {index + 1}/{runs}", cold=cold)
    return all_results


def measure_once(variant: Variant, w: Workload, backoff_s: float, results: Results, *,
                 tmp: Path, label: str, cold: bool) -> None:
    with scratch(tmp, f"{w.key}-drill-") as work:
        try:
            d = one_drill(variant, w, backoff_s, work)
            results.drills.append(d)
            progress(f"{label} drill: detection {d.detection_ms:.2f} ms (end to end "
                     f"{d.end_to_end_ms:.2f} ms), restart {d.restart_s:.3f}s, recovery "
                     f"{d.recovery_s:.3f}s, steps lost {d.steps_lost}, others stopped in "
                     f"{d.stopped_s:.3f}s ({', '.join(d.stop_exits)}); "
                     f"load {os.getloadavg()[0]:.2f}")
        except BenchmarkError as exc:
            results.errors.append(str(exc))
            progress(f"{label} drill FAILED: {exc}")
    if not cold:
        return
    with scratch(tmp, f"{w.key}-cold-") as work:
        try:
            c = one_cold(variant, w, backoff_s, work)
            results.colds.append(c)
            progress(f"{label} cold start: first step after {c.total_s:.3f}s; "
                     f"load {os.getloadavg()[0]:.2f}")
        except BenchmarkError as exc:
            results.errors.append(str(exc))
            progress(f"{label} cold run FAILED: {exc}")


def time_tf_import(runs: int) -> list[float]:
    """Wall time of ``python -c 'import tensorflow'`` alone: the floor of a TF task's start."""
    times: list[float] = []
    for _ in range(runs):
        started = time.time()
        subprocess.run([sys.executable, "-c", "import tensorflow"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        times.append(time.time() - started)
    return times
