"""What the coordinator costs while it watches idle tasks: its CPU (% of one core) and RSS.

Run it with the project's interpreter (the tasks use the same one)::

    .venv/bin/python benchmarks/coordinator_load.py [--sizes 64,256] [--window 20]

For every N it starts ``tfcluster local -n N --quiet -- PYTHON benchmarks/tasks/idle_task.py GO
STOP`` (tasks that report a step every second and do nothing else), waits until every task has
reported its first step, creates ``GO`` (from then on each task reports a new step every second),
lets it settle for a second, then reads the coordinator's ``cpu_times`` (user +
system, its own threads only: not the agent, a child it has not reaped) at the start and the end of
a ``--window`` of seconds, and its RSS every half second. The one local agent is measured the same
way, for reference. Then it creates ``STOP``: every task exits 0 within a second, and so does
tfcluster.

Every process carries a marker env var (``BENCH_LOAD_MARKER``); at the end psutil checks that none
is left (any that is gets killed, and the script exits 1).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
from common import (
    REPO,
    BenchmarkError,
    CommandLog,
    Tfcluster,
    default_tfcluster,
    new_marker,
    of,
    progress,
    read_events,
    scratch,
    ts,
)
from machine import compile_bytecode
from targets import COORDINATOR_CPU_PCT, COORDINATOR_RSS_MIB, IDLE_N

from launcher.run.events import EventType

IDLE_TASK = REPO / "benchmarks" / "tasks" / "idle_task.py"
MARKER_ENV = "BENCH_LOAD_MARKER"
MIB = 1024 * 1024
STARTUP_TIMEOUT_S = 180.0
SETTLE_S = 1.0
SAMPLE_EVERY_S = 0.5
STOP_TIMEOUT_S = 60.0
POLL_S = 0.2


@dataclass(frozen=True)
class Usage:
    """One process over the window."""

    cpu_pct: float  # of one core
    rss_max_mib: float
    rss_end_mib: float


@dataclass(frozen=True)
class LoadSample:
    n: int
    startup_s: float  # Popen -> every task had reported its first step
    window_s: float
    coordinator: Usage
    agent: Usage | None


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def wait_all_stepping(proc: subprocess.Popen[bytes], run_dir: Path, n: int) -> float:
    """Wait until each of the N tasks has reported a step; returns when the last one did."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        firsts = [e for e in of(read_events(run_dir), EventType.TASK_PROGRESS) if e.get("first")]
        if len({e.get("task") for e in firsts}) >= n:
            return max(ts(e) for e in firsts)
        try:
            code = proc.wait(timeout=POLL_S)  # wakes at once if tfcluster exits
        except subprocess.TimeoutExpired:
            continue
        raise BenchmarkError(f"tfcluster exited {code} before every task was running")
    raise BenchmarkError(f"the {n} tasks were not all stepping within {STARTUP_TIMEOUT_S:.0f}s")


def the_agent(coordinator: psutil.Process) -> psutil.Process | None:
    for child in coordinator.children():
        try:
            if "worker.agent" in child.cmdline():
                return child
        except psutil.Error:
            continue
    return None


def measure_window(proc: subprocess.Popen[bytes], window_s: float) -> tuple[Usage, Usage | None]:
    coordinator = psutil.Process(proc.pid)
    agent = the_agent(coordinator)
    watched = [p for p in (coordinator, agent) if p is not None]
    rss: dict[int, list[int]] = {p.pid: [] for p in watched}
    began = time.monotonic()
    cpu_before = {p.pid: cpu_seconds(p) for p in watched}
    while (left := began + window_s - time.monotonic()) > 0:
        for p in watched:
            rss[p.pid].append(p.memory_info().rss)
        try:
            code = proc.wait(timeout=min(SAMPLE_EVERY_S, left))
        except subprocess.TimeoutExpired:
            continue
        raise BenchmarkError(f"tfcluster exited {code} during the measurement window")
    cpu_after = {p.pid: cpu_seconds(p) for p in watched}
    took = time.monotonic() - began

    def usage(p: psutil.Process) -> Usage:
        rss[p.pid].append(p.memory_info().rss)
        return Usage((cpu_after[p.pid] - cpu_before[p.pid]) / took * 100,
                     max(rss[p.pid]) / MIB, rss[p.pid][-1] / MIB)

    return usage(coordinator), None if agent is None else usage(agent)


def watch_idle(cli: Tfcluster, n: int, window_s: float, work: Path) -> LoadSample:
    go, stop, run_dir = work / "go", work / "stop", work / "run"
    args = ["local", "-n", str(n), "--quiet", "--run-dir", str(run_dir), "--", sys.executable,
            str(IDLE_TASK), str(go), str(stop)]
    proc, popen_at = cli.popen(args, work)
    try:
        all_stepping = wait_all_stepping(proc, run_dir, n)
        go.touch()
        try:
            code = proc.wait(timeout=SETTLE_S)
            raise BenchmarkError(f"tfcluster exited {code} while the tasks were idle")
        except subprocess.TimeoutExpired:
            pass
        coordinator, agent = measure_window(proc, window_s)
        stop.touch()
        code = proc.wait(timeout=STOP_TIMEOUT_S)
        if code != 0:
            raise BenchmarkError(f"tfcluster exited {code} after the tasks were told to stop")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return LoadSample(n, all_stepping - popen_at, window_s, coordinator, agent)


def measure(cli: Tfcluster, sizes: Sequence[int], window_s: float, tmp: Path, *,
            errors: list[str]) -> list[LoadSample]:
    """The samples of the sizes that behaved; the others' reasons are appended to ``errors``."""
    samples = []
    for n in sizes:
        with scratch(tmp, f"idle-{n}-") as work:
            try:
                try:
                    sample = watch_idle(cli, n, window_s, work)
                finally:
                    cli.check_no_leftovers(10.0)
            except BenchmarkError as exc:
                errors.append(f"N={n}: {exc}")
                progress(f"idle N={n} FAILED: {exc}")
                continue
        samples.append(sample)
        progress(f"idle N={n}: coordinator {sample.coordinator.cpu_pct:.2f}% of one core, "
                 f"RSS {sample.coordinator.rss_max_mib:.1f} MiB")
    return samples


# --- report -------------------------------------------------------------------------------------


def table(samples: Sequence[LoadSample]) -> list[str]:
    lines = [
        "| idle tasks | all stepping after (s) | window (s) | coordinator CPU (% of one core) "
        "| coordinator RSS, max (MiB) | agent CPU (% of one core) | agent RSS, max (MiB) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in samples:
        agent = s.agent
        lines.append(f"| {s.n} | {s.startup_s:.2f} | {s.window_s:g} | {s.coordinator.cpu_pct:.2f} "
                     f"| {s.coordinator.rss_max_mib:.1f} "
                     f"| {'-' if agent is None else f'{agent.cpu_pct:.2f}'} "
                     f"| {'-' if agent is None else f'{agent.rss_max_mib:.1f}'} |")
    return lines


def verdicts(samples: Sequence[LoadSample]) -> list[str]:
    at = [s for s in samples if s.n == IDLE_N]
    if not at:
        return [f"- {COORDINATOR_CPU_PCT.what}: not measured (N={IDLE_N} not among the sizes)"]
    cpu, rss = at[0].coordinator.cpu_pct, at[0].coordinator.rss_max_mib
    return [f"- {COORDINATOR_CPU_PCT.what} {COORDINATOR_CPU_PCT.text}: {cpu:.2f}% -> "
            f"{COORDINATOR_CPU_PCT.verdict(cpu)}",
            f"- {COORDINATOR_RSS_MIB.what} {COORDINATOR_RSS_MIB.text}: {rss:.1f} MiB -> "
            f"{COORDINATOR_RSS_MIB.verdict(rss)}"]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="64,256", help="comma-separated task counts")
    parser.add_argument("--window", type=float, default=20.0, metavar="S",
                        help="seconds of steady state measured (default 20)")
    parser.add_argument("--tfcluster", type=shlex.split, default=default_tfcluster(),
                        help="how to run tfcluster (default: the console script beside this python)")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not args.sizes or any(n < 1 for n in args.sizes) or args.window <= 0:
        parser.error("sizes and --window must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    progress(f"bytecode: {compile_bytecode(REPO)}")
    cli = Tfcluster(tuple(args.tfcluster), MARKER_ENV, new_marker(), CommandLog())
    errors: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-load-") as tmp:
            samples = measure(cli, args.sizes, args.window, Path(tmp), errors=errors)
    finally:
        killed = cli.kill_leftovers()
    print("\n".join([*table(samples), "", *verdicts(samples), *(f"- failed: {e}" for e in errors)]))
    status = 1 if errors else 0
    if killed:
        print(f"- leftover processes (killed): {killed}")
        status = 1
    else:
        print(f"- leftover processes: none with {MARKER_ENV} (checked with psutil)")
    return status


if __name__ == "__main__":
    sys.exit(main())
