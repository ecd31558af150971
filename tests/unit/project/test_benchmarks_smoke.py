"""``benchmarks/run_all.py --quick --no-tf --skip-ssh`` runs every part it is asked to, leaves no
process behind, and writes a report with every section and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[3]
RUN_ALL = REPO / "benchmarks" / "run_all.py"
RUN_TIMEOUT_S = 100.0
#: The published report's sections, in order.
HEADINGS = (
    "# tfcluster benchmarks",
    "## Machine",
    "## Targets",
    "## 1. Launch overhead",
    "## 2. Failure detection",
    "## 3. Restart latency and recovery",
    "## 4. Warm spares: recovery cold vs warm",
    "## 5. Coordinator CPU and memory with idle tasks",
    "## 6. Training throughput",
    "## Commands run",
    "## Leftover processes",
)

pytestmark = pytest.mark.timeout(RUN_TIMEOUT_S + 20)


def test_the_quick_run_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    done = subprocess.run([sys.executable, str(RUN_ALL), "--quick", "--no-tf", "--skip-ssh",
                           "--out", str(out)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    text = out.read_text(encoding="utf-8")
    lines = text.splitlines()
    positions = [lines.index(heading) for heading in HEADINGS]  # ValueError names a missing one
    assert positions == sorted(positions)
    assert "Traceback" not in text
    assert "could not be measured" not in text
    assert "skipped (--no-tf)" in text
    assert "over SSH: skipped (--skip-ssh)" in text
    assert "| 8 |" in text  # the launch table has its N = 8 row
    assert "None: no process with BENCH_RUN_ALL_MARKER" in text
    assert marked_processes() == []  # and not only by the report's word


def marked_processes() -> list[int]:
    """Every living process that carries the benchmark's marker variable, looked up in /proc."""
    found = []
    for process in psutil.process_iter():
        try:
            if "BENCH_RUN_ALL_MARKER" in process.environ():
                found.append(process.pid)
        except psutil.Error:
            continue  # gone, or not ours to read
    return found
