"""What the agent's heartbeat costs per task: before and with the CPU-time and run-queue-wait reads
that name a lock-step job's straggler (``worker/agent/cpu_time.py``).

    .venv/bin/python benchmarks/heartbeat_cost.py [--tasks 8] [--threads 100] [--rounds 300]

Starts ``--tasks`` processes with ``--threads`` threads each (a TensorFlow task has ~100), then
times ``--rounds`` heartbeats' worth of per-task reads, alternating the two ways so that both see
the same machine: **before** (psutil ``cpu_percent`` + ``memory_info`` in one ``oneshot``, what
the agent read until issue 24) and **with** (the same, plus ``cpu_times`` and one
``/proc/PID/task/TID/schedstat`` per thread). Prints microseconds per task per heartbeat (median)
and what that is at one heartbeat a second, as a share of one core. The processes are killed at
the end, whatever happens.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import psutil

from worker.agent.cpu_time import RunQueueWait

#: A process with N idle threads, alive until its stdin closes.
THREADS_CODE = ("import sys, threading\n"
                "stop = threading.Event()\n"
                "for _ in range(int(sys.argv[1])):\n"
                "    threading.Thread(target=stop.wait, daemon=True).start()\n"
                "print('ready', flush=True)\n"
                "sys.stdin.read()\n")


def before(process: psutil.Process, _waits: RunQueueWait) -> None:
    with process.oneshot():
        process.cpu_percent(None)
        process.memory_info()


def with_waits(process: psutil.Process, waits: RunQueueWait) -> None:
    with process.oneshot():
        process.cpu_percent(None)
        process.memory_info()
        process.cpu_times()
    waits.read()


def time_round(read: Callable[[psutil.Process, RunQueueWait], None],
               tasks: Sequence[tuple[psutil.Process, RunQueueWait]]) -> float:
    """Seconds per task for one heartbeat's reads of every task."""
    started = time.perf_counter()
    for process, waits in tasks:
        read(process, waits)
    return (time.perf_counter() - started) / len(tasks)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args(argv)
    children = [subprocess.Popen([sys.executable, "-c", THREADS_CODE, str(args.threads)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                for _ in range(args.tasks)]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        tasks = [(psutil.Process(c.pid), RunQueueWait(c.pid)) for c in children]
        times: dict[str, list[float]] = {"before": [], "with": []}
        for _ in range(args.rounds):
            times["before"].append(time_round(before, tasks))
            times["with"].append(time_round(with_waits, tasks))
        old, new = (statistics.median(times[k]) * 1e6 for k in ("before", "with"))
        print(f"{args.tasks} tasks of {args.threads} threads, {args.rounds} heartbeats, median "
              f"per task per heartbeat: before {old:.0f} us, with CPU time and run-queue wait "
              f"{new:.0f} us (+{new - old:.0f} us, {new / old:.2f}x); at one heartbeat a second "
              f"with {args.tasks} tasks: {new * args.tasks / 1e4:.3f}% of one core "
              f"(before {old * args.tasks / 1e4:.3f}%)")
    finally:
        for child in children:
            child.kill()
            child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
