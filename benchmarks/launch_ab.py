"""The launch of this checkout against an earlier revision, interleaved in one run on this machine.

Figures of ``run_all.py`` from different sessions differ by more than a change to the launch does
(the same code measured ``tfcluster local -n 64`` at 1.22x a bare loop on one machine of this type
and 1.40x on another), so a change is measured against its base, alternately, in one run::

    .venv/bin/python benchmarks/launch_ab.py --base REV [--sizes 1,64] [--repeats 9]

REV is checked out into a temporary git worktree (removed at the end) and selected with
``PYTHONPATH``, which the agent and the tasks inherit. For every N and repeat, in turn: a bare
``Popen``-and-wait loop of N ``python -c STAMP FILE`` processes (each in its own session, as the
agent starts them), ``tfcluster local -n N --quiet -- python -c STAMP FILE`` of REV, and of this
checkout (the order of the two rotating). Printed per N: the medians of start to exit, its ratio
to the bare loop's, and start to the first task's stamp. Every process carries a marker variable;
any left at the end is killed and the exit code is 1.
"""

from __future__ import annotations

import argparse
import compileall
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from common import REPO, kill_marked, median, new_marker, progress

MARKER_ENV = "BENCH_LAUNCH_AB_MARKER"
STAMP = "import sys, time; open(sys.argv[1], 'a').write(f'{time.time()}\\n')"
RUN_TIMEOUT_S = 120.0


def bare(n: int, stamps: Path, *, env: dict[str, str]) -> float:
    started = time.time()
    procs = [subprocess.Popen([sys.executable, "-c", STAMP, str(stamps)], env=env,
                              start_new_session=True) for _ in range(n)]
    for proc in procs:
        proc.wait(timeout=RUN_TIMEOUT_S)
    return time.time() - started


def tfcluster(n: int, stamps: Path, *, env: dict[str, str], work: Path) -> float:
    run_dir = work / "run"
    started = time.time()
    subprocess.run([sys.executable, "-m", "launcher", "local", "-n", str(n), "--quiet",
                    "--run-dir", str(run_dir), "--", sys.executable, "-c", STAMP, str(stamps)],
                   env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True, timeout=RUN_TIMEOUT_S)
    ended = time.time()
    shutil.rmtree(run_dir)
    return ended - started


def one(run: Callable[[Path], float], work: Path) -> tuple[float, float]:
    """(start to exit, start to the first stamp) of ``run`` writing its stamps in ``work``."""
    stamps = work / "stamps"
    stamps.unlink(missing_ok=True)
    began = time.time()
    total = run(stamps)
    first = min(float(line) for line in stamps.read_text().split()) - began
    return total, first


def worktree(rev: str, where: Path) -> Path:
    path = where / "base"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(path),
                    rev], check=True)
    for package in ("launcher", "worker"):  # no compiling on every import, as in this checkout
        compileall.compile_dir(path / package, quiet=2)
    return path


def measure(sizes: Sequence[int], repeats: int, *, base: Path, rev: str, work: Path,
            marker: str) -> None:
    env = {**os.environ, MARKER_ENV: marker}
    envs = {rev: {**env, "PYTHONPATH": os.pathsep.join([str(base), *filter(None, [
        os.environ.get("PYTHONPATH")])])}, "this checkout": env}
    for n in sizes:
        totals: dict[str, list[float]] = {"bare": [], **{name: [] for name in envs}}
        firsts: dict[str, list[float]] = {name: [] for name in envs}
        tfcluster(n, work / "warmup", env=envs["this checkout"], work=work)  # the page cache
        for repeat in range(repeats):
            totals["bare"].append(one(functools.partial(bare, n, env=env), work)[0])
            names = list(envs) if repeat % 2 == 0 else list(reversed(envs))
            for name in names:
                total, first = one(functools.partial(tfcluster, n, env=envs[name], work=work),
                                   work)
                totals[name].append(total)
                firsts[name].append(first)
            progress(f"N={n} repeat {repeat + 1}/{repeats}: " + ", ".join(
                f"{name} {values[-1]:.3f}s" for name, values in totals.items()))
        floor = median(totals["bare"])
        print(f"\n### N={n} (medians of {repeats})\n")
        print("| | start to exit (s) | / bare loop | start to first task (s) |")
        print("|---|---:|---:|---:|")
        print(f"| bare Popen-and-wait loop | {floor:.3f} | 1.00 | |")
        for name in envs:
            value = median(totals[name])
            print(f"| tfcluster, {name} | {value:.3f} | {value / floor:.2f} | "
                  f"{median(firsts[name]):.3f} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the revision to compare with (git)")
    parser.add_argument("--sizes", default="1,64", help="comma-separated task counts")
    parser.add_argument("--repeats", type=int, default=9, help="runs of each (median)")
    args = parser.parse_args(argv)
    marker = new_marker()
    with tempfile.TemporaryDirectory(prefix="tfcluster-launch-ab-") as tmp:
        base = worktree(args.base, Path(tmp))
        try:
            measure([int(n) for n in args.sizes.split(",")], args.repeats, base=base,
                    rev=args.base, work=Path(tmp), marker=marker)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)],
                           check=False)
            left = kill_marked(MARKER_ENV, marker)
    if left:
        print(f"- leftover processes killed: {left}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
