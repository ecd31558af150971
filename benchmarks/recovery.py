"""Recovery time after a task is killed, next to a cold start of the same job.

Run it with the project's interpreter (the tasks use the same one)::

    .venv/bin/python benchmarks/recovery.py [--fake-runs 20] [--tf-runs 3] [--backoff 0.1]

Two workloads, each from a spec that this script writes into a temporary directory (with
``restart.backoff_s`` set by ``--backoff``, 0.1 s by default, instead of the shipped specs' 1.0 s,
``restart.max_restarts: 1``, and a fresh temporary checkpoint directory per run):

- **fake**: ``tests/fake_trainer.py`` (no TensorFlow) as a chief and two workers, 100 steps of 0.02 s,
  the chief checkpointing every 10 steps; ``worker:1`` is killed at step 55.
- **digits**: the real TF MWMS example ``python -m worker.examples.digits`` on two workers (as in
  ``cluster_specs/local-2workers.yaml``), 200 steps, checkpoint every 50, ``--deterministic``;
  ``worker:1`` is killed at step 120.

For every run it launches ``tfcluster drill SPEC --task worker:1 --at-step N --fault kill`` and reads
its ``events.jsonl``:

- detection: ``task_failed.detection_latency_ms`` (the agent saw the death -> the coordinator recorded
  it) and end to end ``fault_injected.ts`` -> ``task_failed.observed_at``;
- recovery: ``task_failed.died_at`` -> the first ``task_progress`` with ``first`` in attempt 1, and
  the steps lost (``launcher.job.drill.report``), broken down into death -> every other task of attempt 0
  stopped (the last ``task_exited``) -> ``checkpoint_found`` (agents exited, checkpoint looked up) ->
  ``job_restarting`` -> ``attempt_started`` (the backoff) -> every task of attempt 1 started
  (``task_started``) -> first step.

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
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from common import (
    REPO,
    BenchmarkError,
    Event,
    default_tfcluster,
    kill_marked,
    loadavg,
    median,
    percentile,
    progress,
    read_events,
    scratch,
    wait_until_gone,
)

from launcher.job.drill import report as drill_report

FAKE_TRAINER = REPO / "tests" / "fake_trainer.py"
MARKER_ENV = "BENCH_RECOVERY_MARKER"  # not TFCLUSTER_*: that prefix is reserved in spec env
DETECTION_TARGET_MS = 50.0
LEFTOVER_WAIT_S = 10.0


# --- workloads ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    steps: int
    checkpoint_every: int
    task: str  # the task the drill kills
    at_step: int
    grace_period_s: float
    timeout_s: float  # per run
    build: Callable[[Workload, str, float], dict[str, Any]]  # (self, marker, backoff) -> spec data

    def spec(self, marker: str, backoff_s: float) -> dict[str, Any]:
        return self.build(self, marker, backoff_s)


def fake_spec(w: Workload, marker: str, backoff_s: float) -> dict[str, Any]:
    return {
        "name": "bench-fake",
        "entrypoint": {"script": str(FAKE_TRAINER),
                       "args": ["--steps", str(w.steps), "--step-time", "0.02",
                                "--checkpoint-every", str(w.checkpoint_every)]},
        "workdir": str(REPO),
        "env": {MARKER_ENV: marker},
        "tasks": [{"type": "chief", "host": "localhost"},
                  {"type": "worker", "host": "localhost", "count": 2}],
        "restart": {"max_restarts": 1, "backoff_s": backoff_s},
        "health": {"grace_period_s": w.grace_period_s},
    }


def digits_spec(w: Workload, marker: str, backoff_s: float) -> dict[str, Any]:
    return {
        "name": "bench-digits",
        "entrypoint": {"module": "worker.examples.digits",
                       "args": ["--steps", str(w.steps), "--checkpoint-every",
                                str(w.checkpoint_every), "--deterministic"]},
        "workdir": str(REPO),
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2", MARKER_ENV: marker},
        "tasks": [{"type": "worker", "host": "localhost", "count": 2}],
        "restart": {"max_restarts": 1, "backoff_s": backoff_s},
        "health": {"grace_period_s": w.grace_period_s},
    }


def workloads(fake_at_step: int, tf_at_step: int, tf_grace_s: float) -> tuple[Workload, Workload]:
    fake = Workload("fake", "fake trainer (chief + 2 workers)", steps=100, checkpoint_every=10,
                    task="worker:1", at_step=fake_at_step, grace_period_s=3.0, timeout_s=90.0,
                    build=fake_spec)
    digits = Workload("digits", "digits, TF MWMS (2 workers)", steps=200, checkpoint_every=50,
                      task="worker:1", at_step=tf_at_step, grace_period_s=tf_grace_s, timeout_s=600.0,
                      build=digits_spec)
    return fake, digits


@dataclass(frozen=True)
class CliRun:
    exit_code: int
    started_at: float  # time.time() just before Popen
    events: list[Event]
    stderr_tail: str


def run_cli(tfcluster: Sequence[str], argv: Sequence[str], marker: str, work: Path,
            timeout_s: float) -> CliRun:
    run_dir = work / "run"
    env = {**os.environ, MARKER_ENV: marker, "NO_COLOR": "1"}
    out_path, err_path = work / "cli.stdout", work / "cli.stderr"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        started = time.time()
        proc = subprocess.Popen([*tfcluster, *argv, "--run-dir", str(run_dir), "--quiet"],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=REPO,
                                env=env)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            kill_marked(MARKER_ENV, marker)
            raise BenchmarkError(f"tfcluster did not finish within {timeout_s:.0f}s") from None
    leftovers = wait_until_gone(MARKER_ENV, marker, LEFTOVER_WAIT_S)
    if leftovers:
        pids = kill_marked(MARKER_ENV, marker)
        raise BenchmarkError(f"{len(pids)} process(es) still running {LEFTOVER_WAIT_S:.0f}s after "
                             f"tfcluster exited (killed): {pids}")
    tail = " | ".join(err_path.read_text(encoding="utf-8", errors="replace").splitlines()[-3:])
    return CliRun(code, started, read_events(run_dir), tail)


# --- events -------------------------------------------------------------------------------------


def of(events: Sequence[Event], kind: str, **fields: Any) -> list[Event]:
    return [e for e in events if e.get("event") == kind
            and all(e.get(k) == v for k, v in fields.items())]


def one(events: Sequence[Event], kind: str, what: str, **fields: Any) -> Event:
    found = of(events, kind, **fields)
    if not found:
        raise BenchmarkError(f"no {kind} event {fields or ''} ({what})")
    return found[0]


def ts(event: Event) -> float:
    return float(event["ts"])


@dataclass(frozen=True)
class ColdSample:
    coordinator_s: float  # Popen -> job_started
    to_attempt_s: float  # job_started -> attempt_started
    spawn_s: float  # attempt_started -> last task_started
    init_s: float  # last task_started -> first step
    total_s: float  # Popen -> first step (first task_progress with first=True)
    all_stepping_s: float  # Popen -> every task reported its first step


def cold_sample(events: Sequence[Event], popen_at: float, attempt: int = 0) -> ColdSample:
    job = one(events, "job_started", "cold start")
    started = one(events, "attempt_started", "cold start", attempt=attempt)
    tasks = of(events, "task_started", attempt=attempt)
    firsts = [e for e in of(events, "task_progress", attempt=attempt) if e.get("first")]
    if not tasks or not firsts:
        raise BenchmarkError(f"attempt {attempt}: no task_started or no first task_progress")
    last_started = max(ts(e) for e in tasks)
    first_step = min(ts(e) for e in firsts)
    return ColdSample(
        coordinator_s=ts(job) - popen_at, to_attempt_s=ts(started) - ts(job),
        spawn_s=last_started - ts(started), init_s=first_step - last_started,
        total_s=first_step - popen_at, all_stepping_s=max(ts(e) for e in firsts) - popen_at)


@dataclass(frozen=True)
class DrillSample:
    detection_ms: float  # task_failed.detection_latency_ms
    end_to_end_ms: float  # fault_injected.ts -> task_failed.observed_at
    recovery_s: float  # task death -> first step of attempt 1
    recovery_all_s: float  # task death -> every task of attempt 1 stepping
    steps_lost: int
    resume_step: int
    stopped_s: float  # death -> last task_exited of attempt 0
    lookup_s: float  # last task_exited -> checkpoint_found (agents gone, checkpoint looked up)
    restarting_s: float  # checkpoint_found -> job_restarting (policy)
    backoff_s: float  # job_restarting -> attempt_started (attempt 1)
    spawn_s: float  # attempt_started -> last task_started (attempt 1)
    init_s: float  # last task_started -> first step (attempt 1)
    cold: ColdSample  # the drill's own attempt 0
    stop_exits: tuple[str, ...]  # how the other tasks of attempt 0 ended


def drill_sample(events: Sequence[Event], popen_at: float, task: str) -> DrillSample:
    injected = one(events, "fault_injected", "the fault was never injected")
    failed = [e for e in of(events, "task_failed", attempt=0) if ts(e) >= ts(injected)]
    if [e.get("task") for e in failed] != [task]:
        raise BenchmarkError(f"expected one task_failed for {task}, got "
                             f"{[(e.get('task'), e.get('kind')) for e in failed]}")
    death = failed[0]
    died_at, observed_at = float(death["died_at"]), float(death["observed_at"])
    exited = of(events, "task_exited", attempt=0)
    stopped_at = max([ts(e) for e in exited], default=observed_at)
    restarting = one(events, "job_restarting", "no restart", attempt=1)
    found = of(events, "checkpoint_found", attempt=0)
    lookup_at = ts(found[0]) if found else ts(restarting)
    started = one(events, "attempt_started", "no attempt 1", attempt=1)
    tasks = of(events, "task_started", attempt=1)
    firsts = [e for e in of(events, "task_progress", attempt=1) if e.get("first")]
    if not tasks or not firsts:
        raise BenchmarkError("attempt 1: no task_started or no first task_progress")
    last_started = max(ts(e) for e in tasks)
    first_step = min(ts(e) for e in firsts)
    report = drill_report(list(events))
    if report.steps_lost is None:
        raise BenchmarkError("drill report: no steps lost figure")
    resume_step = started.get("resume_step")
    exits = tuple(f"{e.get('task')}: " + (str(e.get("signal")) if e.get("signal")
                                          else f"exit {e.get('exit_code')}") for e in exited)
    return DrillSample(
        detection_ms=float(death["detection_latency_ms"]),
        end_to_end_ms=(observed_at - ts(injected)) * 1000,
        recovery_s=first_step - died_at, recovery_all_s=max(ts(e) for e in firsts) - died_at,
        steps_lost=report.steps_lost, resume_step=-1 if resume_step is None else int(resume_step),
        stopped_s=stopped_at - died_at, lookup_s=lookup_at - stopped_at,
        restarting_s=ts(restarting) - lookup_at, backoff_s=ts(started) - ts(restarting),
        spawn_s=last_started - ts(started), init_s=first_step - last_started,
        cold=cold_sample(events, popen_at, attempt=0), stop_exits=exits)


def check_outcome(run: CliRun, what: str) -> None:
    if run.exit_code != 0:
        raise BenchmarkError(f"{what}: tfcluster exited {run.exit_code}: {run.stderr_tail}")
    if not of(run.events, "job_succeeded"):
        raise BenchmarkError(f"{what}: no job_succeeded event")


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Results:
    workload: Workload
    drills: list[DrillSample] = field(default_factory=list)
    colds: list[ColdSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def write_spec(work: Path, data: dict[str, Any]) -> Path:
    path = work / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def one_drill(tfcluster: Sequence[str], w: Workload, marker: str, backoff_s: float,
              work: Path) -> DrillSample:
    spec = write_spec(work, w.spec(marker, backoff_s))
    argv = ["drill", str(spec), "--task", w.task, "--at-step", str(w.at_step), "--fault", "kill",
            "--checkpoint-dir", str(work / "checkpoints")]
    run = run_cli(tfcluster, argv, marker, work, w.timeout_s)
    check_outcome(run, "drill")
    return drill_sample(run.events, run.started_at, w.task)


def one_cold(tfcluster: Sequence[str], w: Workload, marker: str, backoff_s: float,
             work: Path) -> ColdSample:
    spec = write_spec(work, w.spec(marker, backoff_s))
    argv = ["run", str(spec), "--checkpoint-dir", str(work / "checkpoints")]
    run = run_cli(tfcluster, argv, marker, work, w.timeout_s)
    check_outcome(run, "cold run")
    if of(run.events, "job_restarting"):
        raise BenchmarkError("cold run: the job restarted")
    return cold_sample(run.events, run.started_at)


def measure(tfcluster: Sequence[str], w: Workload, runs: int, marker: str, backoff_s: float,
            *, tmp: Path, warmup: int) -> Results:
    results = Results(w)
    for index in range(warmup):  # page cache, .pyc: not counted
        with scratch(tmp, f"{w.key}-warmup-") as work:
            try:
                one_cold(tfcluster, w, marker, backoff_s, work)
            except BenchmarkError as exc:
                progress(f"{w.key} warm-up {index + 1}: {exc}")
    for index in range(runs):
        label = f"{w.key} {index + 1}/{runs}"
        with scratch(tmp, f"{w.key}-drill-") as work:
            try:
                d = one_drill(tfcluster, w, marker, backoff_s, work)
                results.drills.append(d)
                progress(f"{label} drill: detection {d.detection_ms:.2f} ms (end to end "
                         f"{d.end_to_end_ms:.2f} ms), recovery {d.recovery_s:.3f}s, "
                         f"steps lost {d.steps_lost}, others stopped in {d.stopped_s:.3f}s "
                         f"({', '.join(d.stop_exits)}); load {os.getloadavg()[0]:.2f}")
            except BenchmarkError as exc:
                results.errors.append(str(exc))
                progress(f"{label} drill FAILED: {exc}")
        with scratch(tmp, f"{w.key}-cold-") as work:
            try:
                c = one_cold(tfcluster, w, marker, backoff_s, work)
                results.colds.append(c)
                progress(f"{label} cold start: first step after {c.total_s:.3f}s; "
                         f"load {os.getloadavg()[0]:.2f}")
            except BenchmarkError as exc:
                results.errors.append(str(exc))
                progress(f"{label} cold run FAILED: {exc}")
    return results


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
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.2f}"


def detection_table(all_results: Sequence[Results]) -> list[str]:
    lines = [
        "### Failure detection (SIGKILL of worker:1 by `tfcluster drill --fault kill`)",
        "",
        "| workload | metric | runs | p50 (ms) | p95 (ms) | max (ms) | target |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in all_results:
        if not r.drills:
            continue
        rows = (("`task_failed.detection_latency_ms` (agent saw the death -> coordinator recorded)",
                 [d.detection_ms for d in r.drills]),
                ("end to end: `fault_injected.ts` -> `task_failed.observed_at`",
                 [d.end_to_end_ms for d in r.drills]))
        for name, values in rows:
            p95 = percentile(values, 95)
            verdict = "PASS" if p95 < DETECTION_TARGET_MS else "FAIL"
            lines.append(f"| {r.workload.key} | {name} | {len(values)} | {median(values):.2f} "
                         f"| {p95:.2f} | {max(values):.2f} "
                         f"| p95 < {DETECTION_TARGET_MS:.0f} ms: {verdict} |")
    return lines


def recovery_table(all_results: Sequence[Results]) -> list[str]:
    lines = [
        "### Recovery vs cold start (seconds, median; [min-max])",
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

        def span(values: Sequence[float]) -> str:
            return f"{secs(median(values))} [{secs(min(values))}-{secs(max(values))}]" \
                if values else "-"

        recovery = [x.recovery_s for x in d]
        cold = [x.total_s for x in c]
        lost = sorted({x.steps_lost for x in d})
        ratio = f"{median(recovery) / median(cold):.2f}" if d and c else "-"
        lines.append(
            f"| {r.workload.key} | {len(d)} | {span(recovery)} "
            f"| {span([x.recovery_all_s for x in d])} "
            f"| {'/'.join(map(str, lost)) or '-'} | {len(c)} | {span(cold)} "
            f"| {span([x.cold.total_s for x in d])} | {ratio} |")
    return lines


def breakdown_table(all_results: Sequence[Results]) -> list[str]:
    lines = [
        "### Where recovery time goes (seconds, median over the drills; death = "
        "`task_failed.died_at`)",
        "",
        "| workload | death -> all other tasks stopped (last `task_exited`) | -> `checkpoint_found` "
        "(agents exit, checkpoint lookup) | -> `job_restarting` | -> `attempt_started` (backoff) "
        "| -> all tasks started (agent + spawn) | -> first step (task init: imports, MWMS, "
        "restore) | sum of medians | recovery (median) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in all_results:
        d = r.drills
        if not d:
            continue
        parts = [median([x.stopped_s for x in d]), median([x.lookup_s for x in d]),
                 median([x.restarting_s for x in d]), median([x.backoff_s for x in d]),
                 median([x.spawn_s for x in d]), median([x.init_s for x in d])]
        lines.append(f"| {r.workload.key} | " + " | ".join(secs(p) for p in parts)
                     + f" | {secs(sum(parts))} | {secs(median([x.recovery_s for x in d]))} |")
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
        lines.append(f"| {r.workload.key} | {len(c)} | {secs(median([x.coordinator_s for x in c]))} "
                     f"| {secs(median([x.to_attempt_s for x in c]))} "
                     f"| {secs(median([x.spawn_s for x in c]))} | {secs(median([x.init_s for x in c]))} "
                     f"| {secs(median([x.total_s for x in c]))} "
                     f"| {secs(median([x.all_stepping_s for x in c]))} |")
    return lines


def setup_lines(all_results: Sequence[Results], backoff_s: float) -> list[str]:
    lines = ["### Setup", ""]
    for r in all_results:
        w = r.workload
        lines.append(f"- {w.key}: {w.title}, {w.steps} steps, chief checkpoints every "
                     f"{w.checkpoint_every}; drill kills {w.task} (SIGKILL) at step {w.at_step}; "
                     f"restart.max_restarts 1, restart.backoff_s {backoff_s:g} s, "
                     f"health.grace_period_s {w.grace_period_s:g}")
    lines.append(f"- restart backoff used: {backoff_s:g} s, set in the specs this benchmark writes "
                 "(the shipped cluster_specs use 1.0 s: add 0.9 s to every recovery figure for them)")
    exits: dict[str, int] = {}
    for r in all_results:
        for d in r.drills:
            for text in d.stop_exits:
                key = f"{r.workload.key} {text}"
                exits[key] = exits.get(key, 0) + 1
    if exits:
        lines.append("- how the surviving tasks of attempt 0 ended: "
                     + "; ".join(f"{k} ({n}x)" for k, n in sorted(exits.items())))
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
    marker = uuid.uuid4().hex
    fake, digits = workloads(args.fake_at_step, args.tf_at_step, args.tf_grace)
    progress(f"tfcluster: {shlex.join(args.tfcluster)}; marker {MARKER_ENV}={marker}")
    load_before = loadavg()
    began = time.monotonic()
    all_results: list[Results] = []
    tf_import: list[float] = []
    status = 0
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-recovery-") as tmp:
            if args.fake_runs:
                all_results.append(measure(args.tfcluster, fake, args.fake_runs, marker,
                                           args.backoff, tmp=Path(tmp), warmup=args.warmup))
            if args.tf_runs:
                all_results.append(measure(args.tfcluster, digits, args.tf_runs, marker,
                                           args.backoff, tmp=Path(tmp), warmup=0))
                with contextlib.suppress(subprocess.CalledProcessError):
                    tf_import = time_tf_import(1)
    finally:
        killed = kill_marked(MARKER_ENV, marker)
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
    for r in all_results:
        for error in dict.fromkeys(r.errors):
            times = r.errors.count(error)
            print(f"- {r.workload.key}: failed run (not counted){f' {times}x' if times > 1 else ''}"
                  f": {error}")
            status = 1
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
