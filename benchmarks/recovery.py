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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import (
    REPO,
    BenchmarkError,
    CliRun,
    CommandLog,
    Tfcluster,
    default_tfcluster,
    loadavg,
    median,
    merged,
    new_marker,
    of,
    percentile,
    progress,
    scratch,
    write_spec,
)
from phases import ColdSample, DrillSample, cold_sample, drill_sample
from targets import DETECTION_P95_MS

from launcher.run.events import EventType

FAKE_TRAINER = REPO / "tests" / "support" / "fake_trainer.py"
TIMED_ENTRY = REPO / "benchmarks" / "tasks" / "timed_entry.py"
TIMING_DIR_ENV = "BENCH_TIMING_DIR"  # read by tasks/timed_entry.py
MARKER_ENV = "BENCH_RECOVERY_MARKER"  # not TFCLUSTER_*: that prefix is reserved in spec env
LEFTOVER_WAIT_S = 10.0


# --- workloads ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """A job to hurt: what its tasks run, where, and when the drill kills which task. Every task
    starts through ``tasks/timed_entry.py``, which notes when ``heavy_import`` had been imported."""

    key: str
    title: str
    entry: tuple[str, ...]  # the entry argv: (SCRIPT, ARGS...) or ("-m", MODULE, ARGS...)
    heavy_import: str
    tasks: tuple[Mapping[str, Any], ...]
    steps: int
    checkpoint_every: int
    task: str  # the task the drill kills
    at_step: int
    grace_period_s: float
    timeout_s: float  # per run
    env: Mapping[str, str] = field(default_factory=dict)

    def spec(self, marker: Mapping[str, str], backoff_s: float, timing_dir: Path,
             overrides: Mapping[str, Any]) -> dict[str, Any]:
        return merged({
            "name": f"bench-{self.key}",
            "entrypoint": {"script": str(TIMED_ENTRY), "args": [self.heavy_import, *self.entry]},
            "workdir": str(REPO),
            "env": {**self.env, **marker, TIMING_DIR_ENV: str(timing_dir)},
            "tasks": [dict(t) for t in self.tasks],
            "restart": {"max_restarts": 1, "backoff_s": backoff_s},
            "health": {"grace_period_s": self.grace_period_s},
        }, overrides)


def fake_workload(*, workers: int = 2, chief: bool = False, steps: int = 100,
                  checkpoint_every: int = 10, at_step: int = 55, key: str = "fake") -> Workload:
    """``tests/support/fake_trainer.py`` (no TensorFlow), steps of 0.02 s, the chief checkpointing."""
    tasks = ([{"type": "chief", "host": "localhost"}] if chief else []) \
        + [{"type": "worker", "host": "localhost", "count": workers}]
    shape = f"{'chief + ' if chief else ''}{workers} workers"
    return Workload(key, f"fake trainer ({shape})",
                    entry=(str(FAKE_TRAINER), "--steps", str(steps), "--step-time", "0.02",
                           "--checkpoint-every", str(checkpoint_every)),
                    heavy_import="worker.reporting", tasks=tuple(tasks), steps=steps,
                    checkpoint_every=checkpoint_every, task="worker:1", at_step=at_step,
                    grace_period_s=3.0, timeout_s=90.0)


def digits_workload(*, steps: int = 200, checkpoint_every: int = 50, at_step: int = 120,
                    grace_s: float = 10.0) -> Workload:
    """The real TF MWMS example on two workers (as in ``cluster_specs/local-2workers.yaml``)."""
    return Workload("digits", "digits, TF MWMS (2 workers)",
                    entry=("-m", "worker.examples.digits", "--steps", str(steps),
                           "--checkpoint-every", str(checkpoint_every), "--deterministic"),
                    heavy_import="tensorflow",
                    tasks=({"type": "worker", "host": "localhost", "count": 2},), steps=steps,
                    checkpoint_every=checkpoint_every, task="worker:1", at_step=at_step,
                    grace_period_s=grace_s, timeout_s=600.0, env={"TF_CPP_MIN_LOG_LEVEL": "2"})


def workloads(fake_at_step: int, tf_at_step: int, tf_grace_s: float) -> tuple[Workload, Workload]:
    return (fake_workload(chief=True, at_step=fake_at_step),
            digits_workload(at_step=tf_at_step, grace_s=tf_grace_s))


def no_overrides() -> Mapping[str, Any]:
    return {}


def nothing_to_check() -> None:
    return None


@dataclass(frozen=True)
class Variant:
    """One way of running a workload, its results labelled ``label``: the CLI to run it with,
    what to change in its spec (called for every run: fresh ports...), and a check after every run
    (BenchmarkError if something is left behind that the marker cannot see, e.g. sshd sessions)."""

    label: str
    cli: Tfcluster
    overrides: Callable[[], Mapping[str, Any]] = no_overrides
    check_after: Callable[[], None] = nothing_to_check


def check_outcome(run: CliRun, what: str) -> None:
    if run.exit_code != 0:
        raise BenchmarkError(f"{what}: tfcluster exited {run.exit_code}: {run.tail()}")
    if not of(run.events, EventType.JOB_SUCCEEDED):
        raise BenchmarkError(f"{what}: no job_succeeded event")


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Results:
    workload: Workload
    label: str
    drills: list[DrillSample] = field(default_factory=list)
    colds: list[ColdSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


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


# --- report -------------------------------------------------------------------------------------


def secs(value: float) -> str:
    return f"{value:.4f}" if abs(value) < 0.01 else f"{value:.3f}" if abs(value) < 10 \
        else f"{value:.2f}"


def span(values: Sequence[float]) -> str:
    """``median [min-max]`` in seconds, ``-`` for no values."""
    return f"{secs(median(values))} [{secs(min(values))}-{secs(max(values))}]" if values else "-"


def detection_table(all_results: Sequence[Results], title: str | None = None) -> list[str]:
    lines = [
        title or "### Failure detection (SIGKILL of worker:1 by `tfcluster drill --fault kill`)",
        "",
        "| workload | metric | runs | p50 (ms) | p95 (ms) | max (ms) | target |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in all_results:
        if not r.drills:
            continue
        rows = (("`task_failed.detection_latency_ms` (agent saw the death -> coordinator recorded)",
                 [d.detection_ms for d in r.drills], True),
                ("end to end: `fault_injected.ts` (kill sent) -> `task_failed.observed_at`",
                 [d.end_to_end_ms for d in r.drills], False))
        for name, values, targeted in rows:
            p95 = percentile(values, 95)
            verdict = f"p95 {DETECTION_P95_MS.text}: {DETECTION_P95_MS.verdict(p95)}" \
                if targeted else ""
            lines.append(f"| {r.label} | {name} | {len(values)} | {median(values):.2f} "
                         f"| {p95:.2f} | {max(values):.2f} | {verdict} |")
    return lines


def recovery_table(all_results: Sequence[Results]) -> list[str]:
    lines = [
        "### Recovery vs cold start (seconds, median [min-max])",
        "",
        "| workload | drills | recovery: death -> first step after restart | ... every task "
        "stepping | steps lost | cold runs | cold start: Popen `tfcluster run` -> first step "
        "| cold start in the drills' attempt 0 | recovery / cold |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in all_results:
        d, c = r.drills, r.colds
        if not d and not c:
            continue
        recovery = [x.recovery_s for x in d]
        cold = [x.total_s for x in c]
        lost = sorted({x.steps_lost for x in d})
        ratio = f"{median(recovery) / median(cold):.2f}" if d and c else "-"
        lines.append(
            f"| {r.label} | {len(d)} | {span(recovery)} "
            f"| {span([x.recovery_all_s for x in d])} "
            f"| {'/'.join(map(str, lost)) or '-'} | {len(c)} | {span(cold)} "
            f"| {span([x.cold.total_s for x in d])} | {ratio} |")
    return lines


def phase_medians(drills: Sequence[DrillSample]) -> list[float | None]:
    """Medians of detect, stop, plan, spawn, import (None without timing files), first step."""
    imports = [d.restart.import_s for d in drills]
    return [median([d.detect_s for d in drills]), median([d.stop_s for d in drills]),
            median([d.plan_s for d in drills]), median([d.restart.spawn_s for d in drills]),
            None if any(i is None for i in imports) else median([i or 0.0 for i in imports]),
            median([d.restart.first_step_s for d in drills])]


def breakdown_table(all_results: Sequence[Results], level: str = "###") -> list[str]:
    lines = [
        f"{level} Where recovery time goes (seconds, median over the drills; death = "
        "`task_failed.died_at`)",
        "",
        "| workload | detect: death -> `task_failed.observed_at` | stop: -> last `task_exited` "
        "| plan: -> `attempt_started` (teardown confirmed, checkpoint lookup, policy, backoff) "
        "| spawn: -> every `task_started` | import: -> every task had imported its heavy module "
        "(interpreter start included) "
        "| first step: -> first `task_progress` (MWMS, restore, step) | sum of medians "
        "| recovery (median) | restarts with every task from a warm spare |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in all_results:
        d = r.drills
        if not d:
            continue
        parts = phase_medians(d)
        spares = [x.restart.warm for x in d]
        warm = "-" if None in spares else f"{sum(bool(x) for x in spares)} of {len(spares)}"
        lines.append(f"| {r.label} | " + " | ".join("-" if p is None else secs(p) for p in parts)
                     + f" | {secs(sum(p or 0.0 for p in parts))} "
                     f"| {secs(median([x.recovery_s for x in d]))} | {warm} |")
    return lines


def cold_table(all_results: Sequence[Results]) -> list[str]:
    lines = [
        "### Cold start breakdown (seconds, median; `tfcluster run`, no fault)",
        "",
        "| workload | runs | Popen -> `job_started` (coordinator start) | -> `attempt_started` "
        "| -> all tasks started (agent + spawn) | -> first step (task init) | total | every task "
        "stepping |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in all_results:
        c = r.colds
        if not c:
            continue
        lines.append(f"| {r.label} | {len(c)} | {secs(median([x.coordinator_s for x in c]))} "
                     f"| {secs(median([x.to_attempt_s for x in c]))} "
                     f"| {secs(median([x.start.spawn_s for x in c]))} "
                     f"| {secs(median([x.start.init_s for x in c]))} "
                     f"| {secs(median([x.total_s for x in c]))} "
                     f"| {secs(median([x.all_stepping_s for x in c]))} |")
    return lines


def setup_lines(all_results: Sequence[Results], backoff_s: float) -> list[str]:
    lines = ["### Setup", ""]
    for r in all_results:
        w = r.workload
        lines.append(f"- {r.label}: {w.title}, {w.steps} steps, chief checkpoints every "
                     f"{w.checkpoint_every}; drill kills {w.task} (SIGKILL) at step {w.at_step}; "
                     f"restart.max_restarts 1, restart.backoff_s {backoff_s:g} s, "
                     f"health.grace_period_s {w.grace_period_s:g}")
    lines.append(f"- restart backoff used: {backoff_s:g} s, set in the specs this benchmark writes "
                 "(the shipped cluster_specs use 1.0 s: add that to every recovery figure for them)")
    exits: dict[str, int] = {}
    for r in all_results:
        for d in r.drills:
            for text in d.stop_exits:
                key = f"{r.label} {text}"
                exits[key] = exits.get(key, 0) + 1
    if exits:
        lines.append("- how the surviving tasks of attempt 0 ended: "
                     + "; ".join(f"{k} ({n}x)" for k, n in sorted(exits.items())))
    return lines


def cold_reason_lines(all_results: Sequence[Results]) -> list[str]:
    """Why tasks started cold in the restarts (``task_started.cold_reason``), counted."""
    lines = []
    for r in all_results:
        reasons = [why for d in r.drills for why in d.restart.cold_reasons]
        for why in dict.fromkeys(reasons):
            lines.append(f"- {r.label}: {reasons.count(why)} task start(s) of a restart were cold: "
                         f"{why}")
    return lines


def error_lines(all_results: Sequence[Results]) -> list[str]:
    lines = []
    for r in all_results:
        for error in dict.fromkeys(r.errors):
            times = r.errors.count(error)
            lines.append(f"- {r.label}: failed run (not counted)"
                         f"{f' {times}x' if times > 1 else ''}: {error}")
    return lines


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
