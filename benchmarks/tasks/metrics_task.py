"""A task that reports a step with three metrics ``RATE`` times a second until ``STOP_FILE``
exists (benchmarks/metrics_load.py)::

    python benchmarks/tasks/metrics_task.py RATE STOP_FILE
"""

from __future__ import annotations

import os
import sys
import time

import worker


def main(rate: float, stop_file: str) -> None:
    step = 0
    period = 1.0 / rate
    next_at = time.monotonic()
    while not os.path.exists(stop_file):
        step += 1
        worker.report(step, loss=1.0 / step, accuracy=1.0 - 1.0 / step, learning_rate=0.01)
        next_at += period
        time.sleep(max(0.0, next_at - time.monotonic()))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: metrics_task.py RATE STOP_FILE")
    main(float(sys.argv[1]), sys.argv[2])
