"""Launch overhead and failure-detection latency of ``tfcluster local``.

Run it with the project's interpreter (the tasks use the same one)::

    .venv/bin/python benchmarks/launch_overhead.py [--sizes 1,8,32,64] [--repeats 5] [--detect-runs 10]

Launch overhead. For every N in ``--sizes`` it starts, ``--repeats`` times each (interleaved):

- ``tfcluster local -n N --quiet --run-dir <tmp> -- <python> -c <stamp> <file>`` as a subprocess of
  this script, and
- the same N ``<python> -c <stamp> <file>`` processes from a bare ``subprocess.Popen`` loop, each in
  its own session as the agent starts its tasks (with Linux scheduler autogroups a session is a
  scheduling group, which on a busy host changes their CPU share a lot; ``--bare-same-session``
  starts them in this script's session instead),

where ``<stamp>`` is a trivial entrypoint that appends ``time.time()`` and its task name to ``<file>``
(``O_APPEND``, one short line, so concurrent writes never interleave) and exits 0. "All running" is the
latest timestamp written minus the wall-clock time taken just before ``Popen`` (of the CLI, or of the
first bare process). For tfcluster it also records the total time until the CLI exits.

Failure detection. ``tfcluster local -n 4`` runs an entrypoint in which ``worker:2`` sleeps briefly,
writes ``time.time()`` to a file and ``os._exit(3)``\\ s while the others sleep 30 s (tfcluster stops
them itself when ``worker:2`` fails). From ``events.jsonl`` it reads the ``task_failed`` event: its
``detection_latency_ms`` (task exit as the agent saw it -> coordinator recorded it) and, as an
independent end-to-end figure, its ``ts`` minus the time the task wrote just before exiting.

Every process started here carries a marker env var (``BENCH_LAUNCH_MARKER``, unique per
invocation; not ``TFCLUSTER_*``, which tfcluster keeps from its agents and tasks); at the end psutil
checks that no process with it remains (and kills any that does, exiting 1). Temporary directories
are removed.
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
from dataclasses import dataclass, field
from pathlib import Path

from common import (
    REPO,
    BenchmarkError,
    CliRun,
    CommandLog,
    Event,
    Tfcluster,
    default_tfcluster,
    loadavg,
    median,
    new_marker,
    percentile,
    progress,
    read_events,
    scratch,
)
from machine import compile_bytecode
from targets import DETECTION_P95_MS, LAUNCH_N, LAUNCH_RATIO

MARKER_ENV = "BENCH_LAUNCH_MARKER"
INDEX_ENV = "BENCH_LAUNCH_INDEX"
RUN_TIMEOUT_S = 180.0
FAILING_TASK = "worker:2"
FAILING_EXIT_CODE = 3

#: The trivial entrypoint: record when it runs (and who it is), exit 0. argv[1]: the stamp file.
STAMP_CODE = """\
import os, sys, time
t = time.time()
who = os.environ.get('TFCLUSTER_TASK') or os.environ.get('BENCH_LAUNCH_INDEX', '?')
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, (repr(t) + ' ' + who + '\\n').encode())
os.close(fd)
"""

#: worker:2 sleeps argv[2] s, writes time.time() to argv[1] and exits 3; the others sleep 30 s.
FAIL_CODE = """\
import os, sys, time
if os.environ.get('TFCLUSTER_TASK') == 'worker:2':
    time.sleep(float(sys.argv[2]))
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    t = time.time()
    os.write(fd, (repr(t) + '\\n').encode())
    os._exit(3)
time.sleep(30)
"""


# --- processes ----------------------------------------------------------------------------------


def child_env(cli: Tfcluster, **extra: str) -> dict[str, str]:
    return {**os.environ, cli.marker_var: cli.marker, **extra}


def read_stamps(path: Path) -> list[tuple[float, str]]:
    if not path.exists():
        return []
    stamps: list[tuple[float, str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        stamp, _, who = line.partition(" ")
        stamps.append((float(stamp), who))
    return stamps


def check_stamps(path: Path, n: int, what: str) -> float:
    """The latest timestamp, after checking that exactly N distinct tasks wrote one."""
    stamps = read_stamps(path)
    names = {who for _, who in stamps}
    if len(stamps) != n or len(names) != n:
        raise BenchmarkError(f"{what}: expected {n} distinct stamps, got {len(stamps)} "
                             f"from {len(names)} task(s)")
    return max(t for t, _ in stamps)


def failure_reason(run: CliRun, run_dir: Path) -> str:
    """Why a tfcluster run failed, in one line: what the CLI said about an agent, the root cause
    from ``events.jsonl`` and the last line of an agent's traceback, whichever exist."""
    parts = [line.removeprefix("tfcluster: ").strip()
             for line in (run.stdout + run.stderr).splitlines() if "agent on" in line][:1]
    with contextlib.suppress(OSError, ValueError):
        for event in read_events(run_dir):
            cause = event.get("root_cause") if event.get("event") == "job_failed" else None
            if isinstance(cause, dict):
                parts.append(f"root cause {cause.get('task')} {cause.get('kind')}: "
                             f"{cause.get('message') or cause.get('exit_code')}")
    for log in sorted([*run_dir.glob("agents/*.log"), *run_dir.glob("attempt-*/agent-*.log")]):
        text = log.read_text(encoding="utf-8", errors="replace")
        if "Traceback" in text:
            last = [line for line in text.splitlines() if line.strip()][-1]
            parts.append(f"agent crashed ({log.name}): {last.strip()}")
    return "; ".join(parts) or f"exit code {run.exit_code}, no further detail"


# --- launch overhead ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchSample:
    all_running_s: float
    total_s: float


def bare_popen(cli: Tfcluster, n: int, work: Path, new_session: bool = True) -> LaunchSample:
    """N processes of the trivial entrypoint from a plain Popen loop (with ``cli``'s marker). Like
    tfcluster's agent, it starts each in its own session unless ``new_session`` is False (see
    ``--bare-same-session``)."""
    out = work / "stamps"
    argv = [sys.executable, "-c", STAMP_CODE, str(out)]
    cli.commands.record(argv, times=n)
    procs: list[subprocess.Popen[bytes]] = []
    started = time.time()
    try:
        for index in range(n):
            procs.append(subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env=child_env(cli, **{INDEX_ENV: str(index)}),
                start_new_session=new_session))
        codes = [p.wait(timeout=RUN_TIMEOUT_S) for p in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    ended = time.time()
    if any(codes):
        raise BenchmarkError(f"bare Popen N={n}: exit codes {sorted(set(codes))}")
    return LaunchSample(check_stamps(out, n, f"bare Popen N={n}") - started, ended - started)


def run_cli(cli: Tfcluster, args: Sequence[str], work: Path, run_dir: Path) -> CliRun:
    return cli.run(args, work, timeout_s=RUN_TIMEOUT_S, run_dir=run_dir)


def tfcluster_local(cli: Tfcluster, n: int, work: Path) -> LaunchSample:
    """``tfcluster local -n N`` of the trivial entrypoint."""
    out = work / "stamps"
    args = ["local", "-n", str(n), "--quiet", "--run-dir", str(work / "run"), "--",
            sys.executable, "-c", STAMP_CODE, str(out)]
    run = run_cli(cli, args, work, work / "run")
    if run.exit_code != 0:
        raise BenchmarkError(f"exit {run.exit_code}: {failure_reason(run, work / 'run')}")
    latest = check_stamps(out, n, f"tfcluster N={n}")
    return LaunchSample(latest - run.started_at, run.ended_at - run.started_at)


@dataclass
class SizeResult:
    n: int
    bare: list[LaunchSample] = field(default_factory=list)
    tfcluster: list[LaunchSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # why tfcluster runs of this size failed

    @property
    def bare_running(self) -> float:
        return median(s.all_running_s for s in self.bare)

    @property
    def tf_running(self) -> float:
        return median(s.all_running_s for s in self.tfcluster)

    @property
    def tf_total(self) -> float:
        return median(s.total_s for s in self.tfcluster)

    @property
    def ratio(self) -> float:
        return self.tf_running / self.bare_running


def measure_launch(cli: Tfcluster, sizes: Sequence[int], repeats: int, tmp: Path, *,
                   new_session: bool = True) -> list[SizeResult]:
    with scratch(tmp, "warmup-") as work:  # page cache: not counted
        tfcluster_local(cli, 1, work)
    with scratch(tmp, "warmup-") as work:
        bare_popen(cli, 1, work)
    results: list[SizeResult] = []
    for n in sizes:
        result = SizeResult(n)
        results.append(result)
        for repeat in range(repeats):
            with scratch(tmp, f"bare-{n}-") as work:
                result.bare.append(bare_popen(cli, n, work, new_session))
            with scratch(tmp, f"tf-{n}-") as work:
                try:
                    result.tfcluster.append(tfcluster_local(cli, n, work))
                except BenchmarkError as exc:
                    result.errors.append(str(exc))
                    progress(f"N={n} repeat {repeat + 1}/{repeats}: tfcluster failed: {exc}")
                    cli.kill_leftovers()
                    continue
            progress(f"N={n} repeat {repeat + 1}/{repeats}: bare {result.bare[-1].all_running_s:.3f}s,"
                     f" tfcluster {result.tfcluster[-1].all_running_s:.3f}s "
                     f"(exit after {result.tfcluster[-1].total_s:.3f}s)")
    return results


# --- failure detection --------------------------------------------------------------------------


@dataclass(frozen=True)
class DetectionSample:
    detection_latency_ms: float  # the task_failed event's own figure (agent saw exit -> recorded)
    end_to_end_ms: float  # task_failed ts - time the task wrote just before os._exit
    exit_to_agent_ms: float  # died_at (the agent's clock at reaping) - time the task wrote
    cli_exit_s: float  # from the task's exit until tfcluster itself had exited


def detection_run(cli: Tfcluster, work: Path, sleep_s: float) -> DetectionSample:
    run_dir, stamp = work / "run", work / "exit-stamp"
    args = ["local", "-n", "4", "--quiet", "--run-dir", str(run_dir), "--",
            sys.executable, "-c", FAIL_CODE, str(stamp), str(sleep_s)]
    run = run_cli(cli, args, work, run_dir)
    if run.exit_code != FAILING_EXIT_CODE:
        raise BenchmarkError(f"failure drill: tfcluster exited {run.exit_code}, expected "
                             f"{FAILING_EXIT_CODE}: {failure_reason(run, run_dir)}")
    leftovers = cli.leftovers()
    if leftovers:
        raise BenchmarkError(f"failure drill: tfcluster left {len(leftovers)} process(es) "
                             f"running: {[p.pid for p in leftovers]}")
    failed = [e for e in read_events(run_dir) if e.get("event") == "task_failed"]
    if [e.get("task") for e in failed] != [FAILING_TASK]:
        raise BenchmarkError(f"failure drill: expected one task_failed for {FAILING_TASK}, got "
                             f"{[e.get('task') for e in failed]}")
    event: Event = failed[0]
    exited_at = float(stamp.read_text(encoding="utf-8").split()[0])
    return DetectionSample(
        detection_latency_ms=float(event["detection_latency_ms"]),
        end_to_end_ms=(float(event["ts"]) - exited_at) * 1000,
        exit_to_agent_ms=(float(event["died_at"]) - exited_at) * 1000,
        cli_exit_s=run.ended_at - exited_at,
    )


def measure_detection(cli: Tfcluster, runs: int, tmp: Path, sleep_s: float, *,
                      errors: list[str]) -> list[DetectionSample]:
    """The samples of the runs that behaved; the others' reasons are appended to ``errors``."""
    samples: list[DetectionSample] = []
    for index in range(runs):
        with scratch(tmp, "detect-") as work:
            try:
                samples.append(detection_run(cli, work, sleep_s))
            except BenchmarkError as exc:
                errors.append(str(exc))
                progress(f"detection run {index + 1}/{runs}: {exc}")
                cli.kill_leftovers()
                continue
        last = samples[-1]
        progress(f"detection run {index + 1}/{runs}: detection_latency_ms "
                 f"{last.detection_latency_ms:.2f}, end-to-end {last.end_to_end_ms:.2f} ms")
    return samples


# --- report -------------------------------------------------------------------------------------


def launch_table(results: Sequence[SizeResult], repeats: int, new_session: bool) -> list[str]:
    lines = [
        f"### Launch overhead (median of {repeats}; bare processes "
        f"{'each in its own session' if new_session else 'in one session'})",
        "",
        "| N | bare Popen loop (median s) | tfcluster to all running (median s) | ratio "
        "| tfcluster total (median s) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if r.tfcluster:
            partial = f" ({len(r.errors)} of {repeats} failed)" if r.errors else ""
            lines.append(f"| {r.n} | {r.bare_running:.3f} | {r.tf_running:.3f}{partial} "
                         f"| {r.ratio:.2f} | {r.tf_total:.3f} |")
        else:
            lines.append(f"| {r.n} | {r.bare_running:.3f} | FAILED ({len(r.errors)} of {repeats}) "
                         f"| - | - |")
    failed = [r for r in results if r.errors]
    if failed:
        lines.append("")
    for r in failed:
        for error in dict.fromkeys(r.errors):  # distinct reasons, in order
            times = r.errors.count(error)
            lines.append(f"- N={r.n}: tfcluster failed{f' {times}x' if times > 1 else ''}: {error}")
    return lines


def detection_table(samples: Sequence[DetectionSample], errors: Sequence[str]) -> list[str]:
    rows: list[tuple[str, list[float], str]] = [
        ("`detection_latency_ms` (agent saw exit -> coordinator recorded)",
         [s.detection_latency_ms for s in samples], f"p95 {DETECTION_P95_MS.text}"),
        ("end-to-end (task `time.time()` before `os._exit` -> `task_failed` ts)",
         [s.end_to_end_ms for s in samples], ""),
        ("part of it: task exit -> agent reaped it (`died_at`)",
         [s.exit_to_agent_ms for s in samples], ""),
        ("task exit -> tfcluster CLI exited (teardown of the sleepers)",
         [s.cli_exit_s * 1000 for s in samples], ""),
    ]
    lines = [
        f"### Failure detection (tfcluster local -n 4, {FAILING_TASK} exits {FAILING_EXIT_CODE}; "
        f"{len(samples)} runs)",
        "",
        "| metric | p50 (ms) | p95 (ms) | max (ms) | target |",
        "|---|---:|---:|---:|---|",
    ]
    for name, values, target in rows:
        lines.append(f"| {name} | {percentile(values, 50):.2f} | {percentile(values, 95):.2f} "
                     f"| {max(values):.2f} | {target} |")
    if errors:
        lines.append("")
        lines += [f"- failed run (not counted): {error}" for error in errors]
    return lines


def launch_verdict(results: Sequence[SizeResult]) -> str:
    """The launch target, one line: measured in this run, or why not."""
    target = LAUNCH_RATIO
    at_target = [r for r in results if r.n == LAUNCH_N]
    if at_target and not at_target[0].tfcluster:
        return f"{target.what} {target.text}: FAIL (tfcluster could not start {LAUNCH_N} tasks)"
    if at_target:
        ratio = at_target[0].ratio
        return f"{target.what} {target.text}: {ratio:.2f}x -> {target.verdict(ratio)}"
    return f"{target.what} {target.text}: not measured (N={LAUNCH_N} not in --sizes)"


def verdicts(results: Sequence[SizeResult], samples: Sequence[DetectionSample]) -> list[str]:
    lines = ["### Targets", "", f"- {launch_verdict(results)}"]
    if samples:
        p95 = percentile([s.detection_latency_ms for s in samples], 95)
        lines.append(f"- {DETECTION_P95_MS.what} {DETECTION_P95_MS.text}: {p95:.2f} ms -> "
                     f"{DETECTION_P95_MS.verdict(p95)}")
    return lines


# --- main ---------------------------------------------------------------------------------------


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from exc
    if not sizes or any(n < 1 for n in sizes):
        raise argparse.ArgumentTypeError("sizes must be positive integers")
    return sizes


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=parse_sizes, default=[1, 8, 32, 64],
                        help="comma-separated task counts (default 1,8,32,64)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per size (median; default 5)")
    parser.add_argument("--detect-runs", type=int, default=10,
                        help="failure-detection runs (default 10; 0 skips them)")
    parser.add_argument("--fail-after", type=float, default=0.5, metavar="S",
                        help=f"seconds {FAILING_TASK} sleeps before exiting (default 0.5)")
    parser.add_argument("--tfcluster", type=shlex.split, default=default_tfcluster(),
                        help="how to run tfcluster, e.g. 'python -m launcher' (default: the "
                        "console script beside this python)")
    parser.add_argument("--bare-same-session", action="store_true",
                        help="start the bare processes in this script's session (default: each in "
                        "its own, as the agent does; with CONFIG_SCHED_AUTOGROUP that decides how "
                        "much CPU they get on a busy host)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.detect_runs < 0:
        parser.error("--detect-runs must not be negative")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    progress(f"bytecode: {compile_bytecode(REPO)}")
    marker = new_marker()
    progress(f"tfcluster: {shlex.join(args.tfcluster)}; python: {sys.executable}; "
             f"marker {MARKER_ENV}={marker}")
    print(f"Host: {os.cpu_count()} CPU(s), load average before the runs "
          f"{loadavg()}; python {sys.version.split()[0]}")
    print()
    status = 0
    results: list[SizeResult] = []
    samples: list[DetectionSample] = []
    detection_errors: list[str] = []
    cli = Tfcluster(tuple(args.tfcluster), MARKER_ENV, marker, CommandLog())
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-bench-") as tmp:
            results = measure_launch(cli, args.sizes, args.repeats, Path(tmp),
                                     new_session=not args.bare_same_session)
            samples = measure_detection(cli, args.detect_runs, Path(tmp), args.fail_after,
                                        errors=detection_errors)
    except BenchmarkError as exc:
        progress(f"benchmark failed: {exc}")
        status = 1
    finally:
        killed = cli.kill_leftovers()
    if detection_errors or any(r.errors for r in results):
        status = 1
    if any(r.bare for r in results):
        print("\n".join(launch_table([r for r in results if r.bare], args.repeats,
                                     not args.bare_same_session)))
        print()
    if samples:
        print("\n".join(detection_table(samples, detection_errors)))
        print()
    print("\n".join(verdicts(results, samples)))
    print(f"- load average after the runs: {loadavg()}")
    if killed:
        print(f"- leftover processes: {len(killed)} with {MARKER_ENV} were still running and "
              f"were killed: {killed}")
        status = 1
    else:
        print(f"- leftover processes: none with {MARKER_ENV}={marker} (checked with psutil)")
    return status


if __name__ == "__main__":
    sys.exit(main())
