"""Warm spares against early failures (issue 26): a plain MWMS script (no tfcluster imports,
``tasks/plain_mwms_timed.py``, two workers) is killed a few moments after ``tfcluster run`` starts,
cold and with ``restart.warm_spares: true`` (spares preloading TensorFlow); the recovery (the
killed task's death, ``task_failed.died_at`` -> every task of the next attempt finished its first
training step, from the script's own time stamps) of each, and their ratio per moment::

    flock /tmp/tf-tests.lock .venv/bin/python benchmarks/early_kills.py [--at 8,12,20,33] [--runs 2] \
        [--keep-outliers DIR]

For each moment and run the cold and the warm job run one after the other (alternating which goes
first), each: ``tfcluster run SPEC`` (``restart.backoff_s: 0``, ``max_restarts: 1``), ``SIGKILL``
of ``worker:1`` that many seconds after the ``Popen``, then, once every task of attempt 1 has
stepped, ``SIGINT`` to tfcluster; psutil checks that nothing is left.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import (
    REPO,
    BenchmarkError,
    CommandLog,
    Tfcluster,
    default_tfcluster,
    median,
    new_marker,
    of,
    progress,
    read_events,
    scratch,
    write_spec,
)
from targets import (
    EARLY_KILL_AT_S,
    EARLY_KILL_RATIO,
    LATE_KILL_RATIO,
    NEVER_SLOWER_RATIO,
    Target,
)

from launcher.run.events import EventType

TASK = REPO / "benchmarks" / "tasks" / "plain_mwms_timed.py"
MARKER_ENV = "BENCH_EARLY_KILL_MARKER"
MOMENTS_S = (8.0, EARLY_KILL_AT_S, 20.0, 33.0)
#: Runs per moment and variant (the figure is their median): one run of a warm recovery varies
#: by up to ~1 s on this machine (at 33 s: 1.56 s and 2.72 s in two runs), as much as a target.
RUNS = 2
RUN_TIMEOUT_S = 240.0
COLD, WARM = "cold", "warm spares"


@dataclass
class Moment:
    """Recoveries of the jobs killed ``at_s`` after their start, cold and warm (seconds)."""

    at_s: float
    cold: list[float] = field(default_factory=list)
    warm: list[float] = field(default_factory=list)
    warm_starts: list[str] = field(default_factory=list)  # per warm run: "2 of 2 warm", why not
    errors: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if not self.cold or not self.warm:
            return None
        return median(self.warm) / median(self.cold)


def spec(work: Path, warm: bool, marker: dict[str, str]) -> dict[str, Any]:
    checkpoints = work / "checkpoints"
    data: dict[str, Any] = {
        "name": "bench-early-kill",
        "entrypoint": {"script": str(TASK),
                       "args": ["--checkpoint-dir", str(checkpoints), "--steps", "20000",
                                "--save-every", "100", "--step-time", "0.005"]},
        "workdir": str(REPO),
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "BENCH_TIMING_DIR": str(work / "timing"), **marker},
        "checkpoint": {"dir": str(checkpoints)},
        "tasks": [{"type": "worker", "host": "localhost", "count": 2}],
        "restart": {"max_restarts": 1, "backoff_s": 0.0},
        "health": {"grace_period_s": 10},
    }
    if warm:
        data["restart"]["warm_spares"] = True
        data["entrypoint"]["preload"] = ["tensorflow"]
    return data


def first_steps(timing: Path, after: float) -> dict[str, float]:
    """Each task's first training step after ``after`` (time.time()), from the stamps."""
    found: dict[str, float] = {}
    for path in timing.glob("*.steps"):
        stamps = [float(line.split()[0]) for line in path.read_text().splitlines() if line]
        later = [s for s in stamps if s > after]
        if later:
            found[path.stem] = min(later)
    return found


def one_run(cli: Tfcluster, work: Path, at_s: float, warm: bool) -> tuple[float, str]:
    """One job killed ``at_s`` after its start: its recovery, and how attempt 1 started."""
    (work / "timing").mkdir()
    path = write_spec(work, spec(work, warm, {cli.marker_var: cli.marker}))
    run_dir = work / "run"
    proc, began = cli.popen(["run", str(path), "--run-dir", str(run_dir), "--quiet"], work,
                            cwd=REPO, note=f"killed {at_s:g}s in, {WARM if warm else COLD}")
    try:
        return _watch(proc, began, run_dir, work / "timing", at_s)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        cli.check_no_leftovers(15.0)


def _watch(proc: subprocess.Popen[bytes], began: float, run_dir: Path, timing: Path,
           at_s: float) -> tuple[float, str]:
    deadline = began + RUN_TIMEOUT_S
    pid = None
    while pid is None:
        started = of(read_events(run_dir), EventType.TASK_STARTED, attempt=0, task="worker:1")
        pid = started[0]["pid"] if started else None
        _alive_until(proc, deadline, "worker:1 started")
    kill_at = began + at_s
    if time.time() > kill_at:
        raise BenchmarkError(f"worker:1 started only {time.time() - began:.1f}s in")
    time.sleep(kill_at - time.time())  # the moment under test: a time, on purpose
    os.kill(int(pid), signal.SIGKILL)
    while True:
        events = read_events(run_dir)
        failed = of(events, EventType.TASK_FAILED, attempt=0)
        starts = of(events, EventType.TASK_STARTED, attempt=1)
        if failed and len(starts) == 2:
            stepped = first_steps(timing, float(failed[0]["died_at"]))
            if len(stepped) == 2:
                warm = sum(bool(e.get("warm")) for e in starts)
                why = sorted({str(e.get("cold_reason")) for e in starts if e.get("cold_reason")})
                how = f"{warm} of 2 warm" + (f" ({'; '.join(why)})" if why else "")
                return max(stepped.values()) - float(failed[0]["died_at"]), how
        _alive_until(proc, deadline, "every task of attempt 1 stepping")


def _alive_until(proc: subprocess.Popen[bytes], deadline: float, what: str) -> None:
    if proc.poll() is not None:
        raise BenchmarkError(f"tfcluster exited {proc.returncode} before {what}")
    if time.time() > deadline:
        raise BenchmarkError(f"not within {RUN_TIMEOUT_S:.0f}s: {what}")
    time.sleep(0.05)  # polling the run directory's files


def measure(cli: Tfcluster, moments: Sequence[float], runs: int, tmp: Path,
            keep: Path | None = None) -> list[Moment]:
    """Every moment, ``runs`` times cold and warm (interleaved). ``keep``: where the run
    directories of the warm runs that recovered slowest are kept (:func:`keep_outliers`)."""
    results = [Moment(at) for at in moments]
    kept: dict[float, list[tuple[float, Path]]] = {m.at_s: [] for m in results}
    for index in range(runs):
        for number, moment in enumerate(results):
            order = (False, True) if (index + number) % 2 == 0 else (True, False)
            for warm in order:
                label = f"killed {moment.at_s:g}s in, {WARM if warm else COLD}, run {index + 1}"
                with scratch(tmp, "early-kill-") as work:
                    try:
                        recovery, how = one_run(cli, work, moment.at_s, warm)
                    except BenchmarkError as exc:
                        moment.errors.append(f"{label}: {exc}")
                        progress(f"{label}: FAILED: {exc}")
                        continue
                    if warm and keep is not None:
                        where = keep / f"at-{moment.at_s:g}s-run-{index + 1}"
                        shutil.copytree(work, where, ignore=_CHECKPOINTS)
                        kept[moment.at_s].append((recovery, where))
                (moment.warm if warm else moment.cold).append(recovery)
                if warm:
                    moment.warm_starts.append(how)
                progress(f"{label}: recovery {recovery:.2f}s ({how}); "
                         f"load {os.getloadavg()[0]:.2f}")
    if keep is not None:
        keep_outliers(kept)
        with contextlib.suppress(OSError):  # no outlier: nothing left there
            keep.rmdir()
    return results


#: A warm run this much slower than the median of its moment's warm runs is an outlier.
OUTLIER_FACTOR = 1.3
_CHECKPOINTS = shutil.ignore_patterns("checkpoints")


def keep_outliers(kept: dict[float, list[tuple[float, Path]]]) -> None:
    """Remove the kept directories of every warm run but the outliers (slower than
    :data:`OUTLIER_FACTOR` times the median of their moment), and say where those are: their
    run directory (events, agent and task logs) and the script's time stamps tell where the time
    went."""
    for at_s, runs in kept.items():
        if not runs:
            continue
        typical = median([recovery for recovery, _ in runs])
        for recovery, where in runs:
            if len(runs) > 1 and recovery > OUTLIER_FACTOR * typical:
                progress(f"killed {at_s:g}s in, warm: {recovery:.2f}s against a median of "
                         f"{typical:.2f}s: its run directory is kept in {where}")
            else:
                shutil.rmtree(where, ignore_errors=True)


def target_values(results: Sequence[Moment], tf: bool = True
                  ) -> list[tuple[Target, float | None, str]]:
    """Each target with its measured ratio (the worst moment it covers) and how it is shown."""
    rows: list[tuple[Target, float | None, str]] = []
    early = [m.ratio for m in results if m.at_s == EARLY_KILL_AT_S and m.ratio is not None]
    late = [m.ratio for m in results if m.at_s > EARLY_KILL_AT_S and m.ratio is not None]
    every = [m.ratio for m in results if m.ratio is not None]
    for target, ratios in ((EARLY_KILL_RATIO, early), (LATE_KILL_RATIO, late),
                           (NEVER_SLOWER_RATIO, every)):
        worst = max(ratios) if ratios else None
        rows.append((target, worst, f"{worst:.2f}x" if worst is not None
                     else "not measured" + ("" if tf else " (--no-tf)")))
    return rows


def verdicts(results: Sequence[Moment]) -> list[tuple[str, float | None, str]]:
    """The targets: (what, measured ratio, verdict) for 12 s, the later moments, and all."""
    return [(target.what, worst, shown if worst is None
             else f"{shown} {target.text}: {target.verdict(worst)}")
            for target, worst, shown in target_values(results)]


def section(results: Sequence[Moment]) -> list[str]:
    """``run_all.py``'s part of the warm spares section (nothing when not measured)."""
    if not results:
        return []
    return ["", "### A plain MWMS script killed early (`early_kills.py`)", "",
            "`benchmarks/tasks/plain_mwms_timed.py` (no tfcluster imports, no `worker.report`), "
            "2 workers, cold and with `restart.warm_spares: true` (spares preloading "
            "`tensorflow`); worker:1 SIGKILLed that long after `tfcluster run` started; "
            "recovery: its death -> every task of attempt 1 finished its first step "
            f"(median of {RUNS} runs of each).", "",
            *table(results)]


def table(results: Sequence[Moment]) -> list[str]:
    lines = ["| killed after | recovery cold (s) | recovery warm (s) | warm / cold "
             "| how attempt 1 started (warm runs) |", "|---:|---:|---:|---:|---|"]
    for m in results:
        cold = f"{median(m.cold):.2f}" if m.cold else "-"
        warm = f"{median(m.warm):.2f}" if m.warm else "-"
        ratio = "-" if m.ratio is None else f"{m.ratio:.2f}x"
        lines.append(f"| {m.at_s:g} s | {cold} | {warm} | {ratio} | "
                     f"{'; '.join(m.warm_starts) or '-'} |")
    lines += ["", *(f"- {what}: {verdict}" for what, _, verdict in verdicts(results))]
    lines += [f"- failed run (not counted): {e}" for m in results for e in m.errors]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--at", default=",".join(f"{m:g}" for m in MOMENTS_S),
                        help="seconds after the start at which worker:1 is killed")
    parser.add_argument("--runs", type=int, default=RUNS,
                        help=f"runs per moment and variant (median; default {RUNS})")
    parser.add_argument("--tfcluster", type=shlex.split, default=default_tfcluster())
    parser.add_argument("--keep-outliers", type=Path, default=None, metavar="DIR",
                        help="keep the run directories of warm runs slower than "
                             f"{OUTLIER_FACTOR:g}x their moment's median in DIR")
    args = parser.parse_args(argv)
    moments = [float(x) for x in args.at.split(",") if x.strip()]
    cli = Tfcluster(tuple(args.tfcluster), MARKER_ENV, new_marker(), CommandLog())
    began = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-early-kills-") as tmp:
            results = measure(cli, moments, args.runs, Path(tmp), keep=args.keep_outliers)
    finally:
        killed = cli.kill_leftovers()
    print(f"## Warm spares against early kills ({time.monotonic() - began:.0f} s, "
          f"{os.cpu_count()} CPUs)\n")
    print("\n".join(table(results)))
    if killed:
        print(f"- leftover processes killed: {killed}")
    return 1 if killed or any(m.errors for m in results) else 0


if __name__ == "__main__":
    sys.exit(main())
