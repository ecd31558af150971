"""When the warm spares are filled, for scripts that never call ``worker.report`` (issue 26): at
the attempt's first checkpoint, or once the tasks' start-up CPU has settled, long before
``restart.spare_fill_delay_s``; and a restart that comes while the spares still import starts
cold at once instead of waiting for them."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.jobs import Job, by, processes_marked, running, wait_until_gone, write_spec
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(90)

#: Far beyond each test's deadlines: only the signal under test can fill the spares.
FILL_DELAY_S = 120.0

#: A task that stays busy on its main thread (its start-up never settles), says so after 3 s,
#: then writes a checkpoint in CheckpointManager's layout once ``go`` exists (the chief), and
#: ends once ``stop`` exists. It reports nothing.
BUSY_THEN_CHECKPOINT = """
import os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
began, said, saved = time.monotonic(), False, False
while not os.path.exists(os.path.join(here, "stop")):
    if not said and time.monotonic() - began > 3:
        print("busy for 3s", flush=True)
        said = True
    if said and not saved and os.path.exists(os.path.join(here, "go")):
        directory = os.environ["TFCLUSTER_CHECKPOINT_DIR"]
        os.makedirs(directory, exist_ok=True)
        for suffix in (".data-00000-of-00001", ".index"):
            with open(os.path.join(directory, "ckpt-7" + suffix), "w") as out:
                out.write("step 7")
        with open(os.path.join(directory, "checkpoint.tmp"), "w") as out:
            out.write('model_checkpoint_path: "ckpt-7"\\nall_model_checkpoint_paths: "ckpt-7"\\n')
        os.replace(os.path.join(directory, "checkpoint.tmp"), os.path.join(directory, "checkpoint"))
        saved = True
"""

#: A task busy for 2 s (its "imports"), then idle until ``stop`` exists; it reports nothing.
BURST_THEN_IDLE = """
import os, time
here = os.path.dirname(os.path.abspath(__file__))
began = time.monotonic()
while time.monotonic() - began < 2:
    pass
print(f"burst over at {time.clock_gettime(time.CLOCK_BOOTTIME)}", flush=True)
while not os.path.exists(os.path.join(here, "stop")):
    time.sleep(0.05)
"""

#: Busy for 1 s (its start-up), then idle; on attempt 0 it fails once ``fail`` exists, on attempt
#: 1 it ends at once.
FAIL_ON_CUE = """
import os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
if os.environ["TFCLUSTER_ATTEMPT"] != "0":
    sys.exit(0)
began = time.monotonic()
while time.monotonic() - began < 1:
    pass
while not os.path.exists(os.path.join(here, "fail")):
    time.sleep(0.05)
sys.exit(3)
"""

#: What the spares of the restart test import: slower than any deadline here.
SLOW_IMPORT = "import time\ntime.sleep(60)\n"

#: Busy for 2.5 s (its start-up: the spares' imports are expected to take about that much), then
#: idle; on attempt 0 it fails once ``fail`` exists, on attempt 1 it ends at once.
LONG_START_FAIL_ON_CUE = FAIL_ON_CUE.replace("< 1:", "< 2.5:")
#: An import that works for 1 s of CPU time: shorter than the task's start-up, and getting the CPU.
WORKING_IMPORT = "import time\nwhile time.process_time() < 1.0:\n    pass\n"


def spec(tmp_path: Path, name: str, script: str, preload: list[str],
         **restart: Any) -> Path:
    entry = tmp_path / f"{name}_task.py"
    entry.write_text(script)
    return write_spec(tmp_path, {
        "name": name,
        "entrypoint": {"script": str(entry), "preload": preload},
        "tasks": [{"type": "worker", "count": 1}],
        "checkpoint": {"dir": str(tmp_path / "ckpt")},
        "restart": {"max_restarts": 1, "backoff_s": 0.05, "warm_spares": True,
                    "spare_fill_delay_s": FILL_DELAY_S, **restart},
        "health": {"grace_period_s": 2},
    })


def spares(job: Job) -> list[psutil.Process]:
    """The job's warm spare processes alive now."""
    found = []
    for proc in processes_marked(job.mark):
        try:
            if "worker.runtime.spare" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def started_since_boot(proc: psutil.Process) -> float:
    """When ``proc`` started, seconds since boot (``CLOCK_BOOTTIME``, to the clock tick: psutil's
    ``create_time`` rests on a boot time rounded to the second)."""
    with open(f"/proc/{proc.pid}/stat") as stat:
        ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
    return ticks / os.sysconf("SC_CLK_TCK")


def agent_notes(job: Job) -> str:
    return "".join(p.read_text() for p in (job.run_dir / "agents").glob("*"))


def task_log(job: Job, attempt: int = 0) -> str:
    path = job.run_dir / f"attempt-{attempt}" / "worker-0.log"
    return path.read_text() if path.exists() else ""


def test_the_first_checkpoint_fills_the_spares_of_a_script_that_reports_nothing(
        tmp_path: Path) -> None:
    path = spec(tmp_path, "ckptfill", BUSY_THEN_CHECKPOINT, ["json"])
    with running(["run", str(path)], tmp_path / "run", tmp_path) as job:
        wait_until(lambda: "busy for 3s" in task_log(job), 30, "the task busy for 3 s")
        assert spares(job) == []  # busy, no step, no checkpoint: nothing says training runs
        (tmp_path / "go").touch()
        wait_until((tmp_path / "ckpt" / "checkpoint").exists, 10, "the checkpoint")
        seen_at = time.clock_gettime(time.CLOCK_BOOTTIME)
        wait_until(lambda: bool(spares(job)), 10, "a spare after the first checkpoint")
        assert started_since_boot(spares(job)[0]) >= seen_at - 0.05
        assert "the attempt's first checkpoint appeared" in agent_notes(job)
        (tmp_path / "stop").touch()
        assert job.wait(30) == 0, job.stderr
        assert wait_until_gone(job.mark, timeout=10) == []


def test_settled_start_up_cpu_fills_the_spares(tmp_path: Path) -> None:
    path = spec(tmp_path, "cpufill", BURST_THEN_IDLE, ["json"])
    with running(["run", str(path)], tmp_path / "run", tmp_path) as job:
        wait_until(lambda: "burst over at" in task_log(job), 30, "the task's start-up burst")
        burst_over = float(task_log(job).split("burst over at ")[1].split()[0])
        wait_until(lambda: bool(spares(job)), 10, "a spare once the task's CPU settled")
        # not during the task's start-up: only once its burst was over
        assert started_since_boot(spares(job)[0]) >= burst_over - 0.02
        assert "CPU demand settled" in agent_notes(job)
        (tmp_path / "stop").touch()
        assert job.wait(30) == 0, job.stderr
        assert wait_until_gone(job.mark, timeout=10) == []


def test_a_restart_while_the_spares_import_starts_cold_at_once(tmp_path: Path) -> None:
    (tmp_path / "slow_spare_mod.py").write_text(SLOW_IMPORT)
    path = spec(tmp_path, "noswait", FAIL_ON_CUE, ["slow_spare_mod"])
    with running(["run", str(path)], tmp_path / "run", tmp_path) as job:
        wait_until(lambda: bool(spares(job)), 30, "the spare importing (the task settled)")
        importing = spares(job)
        (tmp_path / "fail").touch()
        failed = job.wait_event(by("task_failed", attempt=0), timeout=20)
        started = job.wait_event(by("task_started", attempt=1, task="worker:0"), timeout=20)
        assert job.wait(30) == 0, job.stderr
        # the restart did not wait for the spare's 60 s import, and did not use it
        assert started["ts"] - failed["observed_at"] < 10.0, (failed, started)
        assert started["warm"] is False
        assert "still importing" in (started["cold_reason"] or ""), started
        assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
                   for p in importing), "the importing spare was not stopped"
        assert wait_until_gone(job.mark, timeout=10) == []


#: Reports every step as fast as it can, then exits with ``CODE``.
FAST_REPORTS = """
import os, sys
from worker import report
for step in range(1, 3001):
    report(step, loss=1.0 / step)
sys.exit(int(os.environ["CODE"]))
"""


@pytest.mark.parametrize("code", [0, 143])
def test_the_last_step_reported_reaches_tfcluster_on_exit(tmp_path: Path, code: int) -> None:
    """``worker.report`` batches (issue 26), and still the job's last ``task_progress`` is the
    last step reported, on a normal exit and on an exit 143 (a preemption's)."""
    entry = tmp_path / "fast.py"
    entry.write_text(FAST_REPORTS)
    path = write_spec(tmp_path, {
        "name": "fast", "entrypoint": {"script": str(entry)}, "env": {"CODE": str(code)},
        "tasks": [{"type": "worker", "count": 1}], "restart": {"max_restarts": 0, "backoff_s": 0},
        "health": {"grace_period_s": 2}})
    with running(["run", str(path)], tmp_path / "run", tmp_path) as job:
        # 143 without a new checkpoint, restarts off: the job ends with it
        assert job.wait(60) == code, job.stderr
    steps = [e["step"] for e in job.events() if e["event"] == "task_progress" and e["attempt"] == 0]
    assert steps and max(steps) == 3000 and steps[-1] == 3000, steps


def test_a_restart_while_the_spares_import_and_get_the_cpu_waits_for_them(tmp_path: Path) -> None:
    (tmp_path / "working_spare_mod.py").write_text(WORKING_IMPORT)
    path = spec(tmp_path, "swait", LONG_START_FAIL_ON_CUE, ["working_spare_mod"])
    with running(["run", str(path)], tmp_path / "run", tmp_path) as job:
        wait_until(lambda: bool(spares(job)), 30, "the spare importing (the task settled)")
        spare = spares(job)[0]
        wait_until(lambda: sum(spare.cpu_times()[:2]) >= 0.2, 10, "the spare 0.2 s into its import")
        (tmp_path / "fail").touch()
        started = job.wait_event(by("task_started", attempt=1, task="worker:0"), timeout=20)
        assert job.wait(30) == 0, job.stderr
        # the task waited for the spare, which had less left to import than a cold start
        assert (started["warm"], started["pid"]) == (True, spare.pid), started
        assert "waiting up to" in agent_notes(job)
        assert wait_until_gone(job.mark, timeout=10) == []
