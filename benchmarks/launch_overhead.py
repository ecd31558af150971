"""Launch overhead of ``tfcluster local`` (and its failure-detection latency, from
``exit_detection.py``).

Run it with the project's interpreter (the tasks use the same one)::

    .venv/bin/python benchmarks/launch_overhead.py [--sizes 1,8,32,64] [--repeats 5] [--detect-runs 10]

Launch overhead. For every N in ``--sizes`` it starts, ``--repeats`` times each (interleaved):

- ``tfcluster local -n N --quiet --run-dir <tmp> -- <python> -c <stamp> <file>`` as a subprocess of
  this script,
- the agent alone (``agent_alone.py``): ``python -m worker.agent`` given at once the launch message
  that this ``tfcluster local`` would send it, no coordinator at all,
- the least coordinator (``least_coordinator.py``): a process that starts the agent, validates the
  spec, plans and sends that launch, and does nothing else,
- the bare loop below paced as the agent paces its starts (``worker.agent.startup_pacing``): never more
  of its processes alive than this process has CPUs, and
- the same N ``<python> -c <stamp> <file>`` processes from a bare ``subprocess.Popen`` loop (which
  then waits for every one of them: its total, against tfcluster's until it exits), each in
  its own session as the agent starts its tasks (with Linux scheduler autogroups a session is a
  scheduling group, which on a busy host changes their CPU share a lot; ``--bare-same-session``
  starts them in this script's session instead),

where ``<stamp>`` is a trivial entrypoint that appends ``time.time()`` and its task name to ``<file>``
(``O_APPEND``, one short line, so concurrent writes never interleave) and exits 0. "All running" is the
latest timestamp written minus the wall-clock time taken just before ``Popen`` (of the CLI, of the
agent, or of the first bare process). For tfcluster it also records the total time until the CLI
exits. The agent alone splits tfcluster's overhead into the agent's share and the coordinator's.
The least coordinator's ratio is a floor for tfcluster's: the cost of Python's start, the spec
models, the planner and this agent, with none of the job machinery.

Every process started here carries a marker env var (``BENCH_LAUNCH_MARKER``, unique per
invocation; not ``TFCLUSTER_*``, which tfcluster keeps from its agents and tasks); at the end psutil
checks that no process with it remains (and kills any that does, exiting 1). Temporary directories
are removed.
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent_alone import agent_alone, least_coordinator
from common import (
    REPO,
    RUN_TIMEOUT_S,
    BenchmarkError,
    CommandLog,
    Tfcluster,
    default_tfcluster,
    failure_reason,
    loadavg,
    median,
    new_marker,
    progress,
    scratch,
)
from exit_detection import (
    FAILING_TASK,
    DetectionSample,
    detection_table,
    measure_detection,
)
from launch_report import launch_table, verdicts
from machine import compile_bytecode

from worker.agent.startup_pacing import usable_cpus

MARKER_ENV = "BENCH_LAUNCH_MARKER"
INDEX_ENV = "BENCH_LAUNCH_INDEX"

#: The trivial entrypoint: record when it runs (and who it is), exit 0. argv[1]: the stamp file.
STAMP_CODE = """\
import os, sys, time
t = time.time()
who = os.environ.get('TFCLUSTER_TASK') or os.environ.get('BENCH_LAUNCH_INDEX', '?')
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, (repr(t) + ' ' + who + '\\n').encode())
os.close(fd)
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


# --- launch overhead ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchSample:
    all_running_s: float
    total_s: float


def bare_popen(cli: Tfcluster, n: int, work: Path, new_session: bool = True,
               at_most: int | None = None) -> LaunchSample:
    """N processes of the trivial entrypoint from a plain Popen loop (with ``cli``'s marker). Like
    tfcluster's agent, it starts each in its own session unless ``new_session`` is False (see
    ``--bare-same-session``). With ``at_most``, never more than that many of them are alive: the
    loop waits for one to exit before it starts the next. For these tasks (they exit as soon as
    they ran) that is the pacing tfcluster's agent does (``worker.agent.startup_pacing``) and nothing
    else: how much of a launch's time pacing alone saves on this machine."""
    out = work / "stamps"
    argv = [sys.executable, "-c", STAMP_CODE, str(out)]
    what = "bare Popen" if at_most is None else "paced bare Popen"
    cli.commands.record(argv, times=n, note=None if at_most is None else f"{at_most} at a time")
    live: dict[int, subprocess.Popen[bytes]] = {}
    codes: list[int] = []
    started = time.time()
    try:
        for index in range(n):
            while at_most is not None and len(live) >= at_most:
                pid, status = os.wait()
                if live.pop(pid, None) is not None:
                    codes.append(os.waitstatus_to_exitcode(status))
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env=child_env(cli, **{INDEX_ENV: str(index)}),
                start_new_session=new_session)
            live[proc.pid] = proc
        codes += [proc.wait(timeout=RUN_TIMEOUT_S) for proc in live.values()]
    finally:
        for proc in live.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    ended = time.time()
    if any(codes):
        raise BenchmarkError(f"{what} N={n}: exit codes {sorted(set(codes))}")
    return LaunchSample(check_stamps(out, n, f"{what} N={n}") - started, ended - started)


def tfcluster_local(cli: Tfcluster, n: int, work: Path) -> LaunchSample:
    """``tfcluster local -n N`` of the trivial entrypoint."""
    out = work / "stamps"
    args = ["local", "-n", str(n), "--quiet", "--run-dir", str(work / "run"), "--",
            sys.executable, "-c", STAMP_CODE, str(out)]
    run = cli.run(args, work, timeout_s=RUN_TIMEOUT_S, run_dir=work / "run")
    if run.exit_code != 0:
        raise BenchmarkError(f"tfcluster N={n}: exit {run.exit_code}: "
                             f"{failure_reason(run, work / 'run')}")
    latest = check_stamps(out, n, f"tfcluster N={n}")
    return LaunchSample(latest - run.started_at, run.ended_at - run.started_at)


def agent_only(cli: Tfcluster, n: int, work: Path) -> LaunchSample:
    """The agent alone, given the launch of ``tfcluster local -n N`` of the trivial entrypoint
    (``agent_alone.py``); its total is until it had reported every exit."""
    out = work / "stamps"
    started, done = agent_alone(cli, n, [sys.executable, "-c", STAMP_CODE, str(out)], work)
    return LaunchSample(check_stamps(out, n, f"agent alone N={n}") - started, done - started)


def least_only(cli: Tfcluster, n: int, work: Path) -> LaunchSample:
    """The least coordinator of ``tfcluster local -n N`` of the trivial entrypoint
    (``least_coordinator.py``); its total is until it exited."""
    out = work / "stamps"
    started, done = least_coordinator(cli, n, [sys.executable, "-c", STAMP_CODE, str(out)], work)
    return LaunchSample(check_stamps(out, n, f"least coordinator N={n}") - started,
                        done - started)


@dataclass
class SizeResult:
    n: int
    bare: list[LaunchSample] = field(default_factory=list)
    paced: list[LaunchSample] = field(default_factory=list)  # the bare loop, CPUs at a time
    tfcluster: list[LaunchSample] = field(default_factory=list)
    agent: list[LaunchSample] = field(default_factory=list)  # the agent alone
    least: list[LaunchSample] = field(default_factory=list)  # the least coordinator
    errors: list[str] = field(default_factory=list)  # why tfcluster runs of this size failed

    @property
    def bare_running(self) -> float:
        return median(s.all_running_s for s in self.bare)

    @property
    def paced_running(self) -> float | None:
        return median(s.all_running_s for s in self.paced) if self.paced else None

    @property
    def tf_running(self) -> float:
        return median(s.all_running_s for s in self.tfcluster)

    @property
    def tf_total(self) -> float:
        return median(s.total_s for s in self.tfcluster)

    @property
    def ratio(self) -> float:
        return self.tf_running / self.bare_running

    @property
    def bare_total(self) -> float:
        """The bare loop until every process it started has exited (and been waited for)."""
        return median(s.total_s for s in self.bare)

    @property
    def end_to_end(self) -> float:
        """tfcluster from its start to its exit / the bare loop until all its processes exited."""
        return self.tf_total / self.bare_total

    @property
    def agent_running(self) -> float | None:
        return median(s.all_running_s for s in self.agent) if self.agent else None

    @property
    def least_running(self) -> float | None:
        return median(s.all_running_s for s in self.least) if self.least else None


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
            said = f"N={n} repeat {repeat + 1}/{repeats}"
            with scratch(tmp, f"bare-{n}-") as work:
                result.bare.append(bare_popen(cli, n, work, new_session))
            with scratch(tmp, f"paced-{n}-") as work:
                result.paced.append(bare_popen(cli, n, work, new_session, at_most=usable_cpus()))
            with scratch(tmp, f"agent-{n}-") as work:
                agent = _counted(cli, result, said, functools.partial(agent_only, cli, n, work))
            with scratch(tmp, f"least-{n}-") as work:
                least = _counted(cli, result, said, functools.partial(least_only, cli, n, work))
            with scratch(tmp, f"tf-{n}-") as work:
                tf = _counted(cli, result, said,
                              functools.partial(tfcluster_local, cli, n, work))
            if agent is not None:
                result.agent.append(agent)
            if least is not None:
                result.least.append(least)
            if tf is not None:
                result.tfcluster.append(tf)
                alone = "" if agent is None else f", agent alone {agent.all_running_s:.3f}s"
                alone += "" if least is None else f", least {least.all_running_s:.3f}s"
                progress(f"{said}: bare {result.bare[-1].all_running_s:.3f}s, tfcluster "
                         f"{tf.all_running_s:.3f}s (exit after {tf.total_s:.3f}s){alone}")
    return results


def _counted(cli: Tfcluster, result: SizeResult, said: str,
             run: Callable[[], LaunchSample]) -> LaunchSample | None:
    """``run()``'s sample; None if it failed, its reason then counted in ``result.errors`` and
    anything it left killed."""
    try:
        return run()
    except BenchmarkError as exc:
        result.errors.append(str(exc))
        progress(f"{said}: failed: {exc}")
        cli.kill_leftovers()
        return None


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
