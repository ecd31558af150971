"""An idle task: reports a step to tfcluster every second and does nothing else::

    python benchmarks/tasks/idle_task.py GO_FILE STOP_FILE

It reports step 1 until ``GO_FILE`` exists, so that every task of a large job reports the same first
step however late the coordinator hears of it (tasks that start from different steps are a failure),
then one more step every second until ``STOP_FILE`` exists, and exits 0.
"""

from __future__ import annotations

import os
import sys
import time

import worker

PERIOD_S = 1.0


def main(go_file: str, stop_file: str) -> None:
    step = 1
    while not os.path.exists(stop_file):
        worker.report(step)
        time.sleep(PERIOD_S)
        if os.path.exists(go_file):
            step += 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: idle_task.py GO_FILE STOP_FILE")
    main(sys.argv[1], sys.argv[2])
