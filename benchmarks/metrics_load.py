"""What the coordinator costs while N tasks report metrics: its CPU (% of one core) and RSS.

    .venv/bin/python benchmarks/metrics_load.py [--tasks 64] [--rate 10] [--window 20]

Starts ``tfcluster local -n N --quiet -- PYTHON benchmarks/tasks/metrics_task.py RATE STOP``
(every task reports a step with three metrics RATE times a second: each report becomes a line of
metrics.jsonl and three TensorBoard points), waits until every task has reported, lets it settle
for two seconds, then reads the coordinator's ``cpu_times`` (user + system, all its threads, the
metrics writer included) at the start and the end of ``--window`` seconds. Then it creates STOP and
checks that the job succeeded, how many reports metrics.jsonl holds, and that no process is left.
With ``--tfcluster`` (e.g. an older checkout on PYTHONPATH) the same load can be compared.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from launcher.run.event_log import read_events
from launcher.run.events import EventType

REPO = Path(__file__).resolve().parent.parent
TASK = REPO / "benchmarks" / "tasks" / "metrics_task.py"
MARKER_ENV = "BENCH_METRICS_MARKER"


def reported_tasks(run_dir: Path) -> set[str]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return set()
    return {str(e["task"]) for e in read_events(path, torn_ok=True)
            if e["event"] == EventType.TASK_PROGRESS}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--rate", type=float, default=10.0, help="reports per second per task")
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--tfcluster", type=shlex.split,
                        default=[str(Path(sys.executable).parent / "tfcluster")])
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="metrics-load-"))
    run_dir, stop = work / "run", work / "stop"
    marker = os.urandom(8).hex()
    argv = [*args.tfcluster, "local", "-n", str(args.tasks), "--quiet", "--run-dir", str(run_dir),
            "--", sys.executable, str(TASK), str(args.rate), str(stop)]
    print("$ " + shlex.join(argv), flush=True)
    with (work / "cli.stderr").open("wb") as err:
        proc = subprocess.Popen(argv, cwd=work, stdout=subprocess.DEVNULL, stderr=err,
                                env={**os.environ, MARKER_ENV: marker})
    try:
        deadline = time.monotonic() + 180
        while len(reported_tasks(run_dir)) < args.tasks:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"the tasks did not all report: {(work / 'cli.stderr').read_text()}")
            time.sleep(0.2)
        time.sleep(2.0)  # settle: the benchmark's own pacing, not a test's synchronisation
        coordinator = psutil.Process(proc.pid)
        before = coordinator.cpu_times()
        started = time.monotonic()
        rss = 0
        while time.monotonic() - started < args.window:
            rss = max(rss, coordinator.memory_info().rss)
            time.sleep(0.5)
        after = coordinator.cpu_times()
        took = time.monotonic() - started
        cpu = (after.user + after.system - before.user - before.system) / took * 100
    finally:
        stop.touch()
        code = proc.wait(60)
    lines = (run_dir / "metrics.jsonl").read_text().count("\n") if (run_dir / "metrics.jsonl").exists() else 0
    left = [p for p in psutil.process_iter(["environ"])
            if (p.info.get("environ") or {}).get(MARKER_ENV) == marker]
    print(f"{args.tasks} tasks x {args.rate:g} reports/s (3 metrics each): coordinator "
          f"{cpu:.2f}% of one core over {took:.0f}s, RSS max {rss / 2**20:.1f} MiB; "
          f"exit {code}; metrics.jsonl {lines} lines; left behind: {len(left)}")
    for process in left:
        process.kill()
    return 0 if code == 0 and not left else 1


if __name__ == "__main__":
    sys.exit(main())
