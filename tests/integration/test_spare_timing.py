"""What a warm spare is for: a task whose entrypoint imports something slow starts at once."""

from __future__ import annotations

import selectors
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_spare_support import (
    nothing_left,
    pool,
    start_cold,
    start_warm,
    wait_settled,
)
from worker.agent.spares.pool import SparePool, SpareState
from worker.agent.task_process import STDOUT
from worker.wire.protocol import TaskLaunch

__all__ = ["nothing_left", "pool"]  # fixtures

pytestmark = pytest.mark.timeout(60)

IMPORT_S = 1.5
SLOW = f"import time\ntime.sleep({IMPORT_S})\n"
ENTRY = "import slow_mod\nprint('first line', flush=True)\n"


def test_a_spare_that_preloaded_a_slow_import_starts_the_task_at_once(
        tmp_path: Path, pool: tuple[SparePool, selectors.BaseSelector]) -> None:
    (tmp_path / "slow_mod.py").write_text(SLOW)
    (tmp_path / "entry_mod.py").write_text(ENTRY)
    task = TaskLaunch(task="worker:0",
                      argv=[sys.executable, "-m", "worker.runtime.bootstrap", "-m", "entry_mod"],
                      env={}, cwd=str(tmp_path))

    started = time.monotonic()
    cold = start_cold(task)
    cold_s = cold.wait_for(STDOUT, b"first line\n") - started
    cold.finish()

    spares, selector = pool
    spares.fill([task], ["slow_mod"])
    assert wait_settled(spares, selector, task.task) is SpareState.READY
    assert (spares.spares[task.task].import_s or 0) >= IMPORT_S
    started = time.monotonic()
    warm = start_warm(spares, selector, task)
    warm_s = warm.wait_for(STDOUT, b"first line\n") - started
    assert warm.finish().exit_code == 0

    assert cold_s > IMPORT_S
    # the warm start skipped the import the cold one paid for (how fast it is otherwise is
    # benchmarks/run_all.py's to measure: a loaded machine may take any time to run a line)
    assert warm_s < cold_s - IMPORT_S / 2, \
        f"launch to first line took {warm_s:.3f}s (cold: {cold_s:.3f}s, import {IMPORT_S}s)"
