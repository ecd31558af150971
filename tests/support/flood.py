"""One task floods its stdout (~64 KiB lines as fast as it can) while another crashes: the crash
must be acted on within 2 s of the death, and the coordinator's memory must stay bounded. Shared
by the local test (tests/integration/test_flood.py) and the SSH one (tests/ssh/test_ssh_flood.py).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import psutil

from tests.support.jobs import Job, by

#: worker:0 floods; worker:1 exits 13 after 8 s, writing the moment of its death to a file first.
TASK = """\
import os, sys, time
task = os.environ["TFCLUSTER_TASK"]
if task == "worker:0":
    line = "f" * 65535 + "\\n"
    out = sys.stdout
    while True:
        out.write(line)
else:
    time.sleep(8)
    with open(sys.argv[1], "w") as record:
        record.write(repr(time.time()))
    os._exit(13)
"""

#: Longest allowed from the crash to the coordinator stopping the job, seconds.
STOP_WITHIN_S = 2.0
#: Highest coordinator RSS allowed during the flood, bytes. The issue's ceiling is 300 MiB; a
#: coordinator that queues output reached 284 MiB in these 8 s (1.4 GB in 40 s), a bounded one
#: stays near its idle ~35 MiB.
MAX_COORDINATOR_RSS = 150 * 1024 * 1024


def flood_entrypoint(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    script = tmp_path / "flood.py"
    script.write_text(TASK)
    died = tmp_path / "died-at"
    return {"command": [sys.executable, str(script), str(died)]}, died


def watch(job: Job, died: Path, timeout: float = 60) -> int:
    """Sample the coordinator's RSS until the job ends; the highest value seen."""
    coordinator = psutil.Process(job.proc.pid)
    highest = 0
    deadline = time.monotonic() + timeout
    while job.proc.poll() is None and time.monotonic() < deadline:
        try:
            highest = max(highest, coordinator.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.1)  # a sampling interval, not synchronisation
    return highest


def check(job: Job, died: Path, highest_rss: int) -> None:
    code = job.wait(30)
    assert code == 13, job.stderr
    death = float(died.read_text())
    failed = job.wait_event(by("task_failed", task="worker:1"))
    stopping = job.wait_event(by("job_stopping"))
    assert failed["exit_code"] == 13
    assert failed["observed_at"] - death < STOP_WITHIN_S, failed
    assert stopping["ts"] - death < STOP_WITHIN_S, (stopping, death)
    assert failed["detection_latency_ms"] / 1000 < STOP_WITHIN_S
    assert highest_rss < MAX_COORDINATOR_RSS, f"coordinator RSS {highest_rss / 2**20:.0f} MiB"
