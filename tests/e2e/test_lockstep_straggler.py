"""The slow task of a lock-step job, named with real TensorFlow: three MultiWorkerMirroredStrategy
tasks (``tests/support/lockstep_mwms.py``, a script that never calls ``worker.report``) all-reduce
every step, so their step rates are equal and say nothing.

- Balanced, nobody is named; then worker:1 is limited to a fifth of a core by a CPU quota (a cgroup
  v1 ``cpu`` group the test creates and removes): tfcluster names it, starved of CPU, within 30 s,
  on the console, in ``task_straggling`` and ``job_health`` events, ``status`` and ``summary.json``.
- worker:1 does 20 ms more CPU work per step than its peers: named as doing more work.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.job.task_health import LOCKSTEP_SETTLE_S
from tests.e2e.tfjobs import TEST_TIMEOUT_S, requires_tf
from tests.support.jobs import REPO, Event, Job, by, run_status, running, signal_tfcluster, wait_until_gone
from tests.support.tiers import skip_tier

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S), requires_tf]

SCRIPT = REPO / "tests" / "support" / "lockstep_mwms.py"
CPU_ROOT = Path("/sys/fs/cgroup/cpu")
#: What the acceptance asks: named within this long of the slowdown (or of training starting).
DETECTION_S = 30.0


def lockstep_job(tmp_path: Path, *args: str) -> Path:
    spec: dict[str, Any] = {
        "name": "lockstep",
        "entrypoint": {"script": str(SCRIPT), "args": ["--seconds", "600", *args]},
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path)},
        "tasks": [{"type": "worker", "count": 3}],
        "restart": {"max_restarts": 0},
        "health": {"grace_period_s": 3},
    }
    path = tmp_path / "lockstep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture
def cpu_group() -> Iterator[Path]:
    if not (CPU_ROOT / "cpu.cfs_quota_us").exists():
        skip_tier("needs the cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    group = CPU_ROOT / f"tfcluster-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            (CPU_ROOT / "cgroup.procs").write_text(pid)
        group.rmdir()


def pid_of(job: Job, task: str) -> int:
    return int(job.wait_event(by("task_started", task=task), timeout=60)["pid"])


def judged(event: Event) -> bool:
    """A ``job_health`` event in which every task had lock-step figures."""
    tasks = event.get("tasks") or {}
    return event["event"] == "job_health" and len(tasks) == 3 and all(
        figures.get("wait_share") is not None for figures in tasks.values())


def stop(job: Job) -> None:
    signal_tfcluster(job, signal.SIGTERM)
    assert job.wait(60) == 128 + signal.SIGTERM, job.stderr
    assert not wait_until_gone(job.mark, 15), "a task outlived the job"



def test_a_balanced_job_names_no_one_then_a_cpu_starved_task_is_named(
        tmp_path: Path, cpu_group: Path) -> None:
    with running(["run", str(lockstep_job(tmp_path))], tmp_path / "run", tmp_path) as job:
        victim = pid_of(job, "worker:1")
        first = job.wait_event(judged, timeout=120)
        # four looks (5 s apart) at every task's figures: a balanced job names no one
        job.wait_event(lambda e: judged(e) and e["ts"] >= first["ts"] + 15, timeout=60)
        assert not [e for e in job.events() if e["event"] == "task_straggling"], job.stderr
        (cpu_group / "cpu.cfs_period_us").write_text("100000")
        (cpu_group / "cpu.cfs_quota_us").write_text("20000")  # a fifth of a core
        (cpu_group / "cgroup.procs").write_text(str(victim))  # every thread of it
        limited = time.time()
        named = job.wait_event(by("task_straggling", straggling=True), timeout=90)
        last_health = job.wait_event(lambda e: judged(e) and e["ts"] > named["ts"], timeout=30)
        stop(job)
    assert named["task"] == "worker:1" and named["cause"] == "starved", named
    assert named["ts"] - limited <= DETECTION_S, named["ts"] - limited
    assert named["wait_share"] > 0.5 and named["wait_share"] > named["others_wait_share"]
    assert "worker:1 on localhost: starved of CPU (waits for a core" in named["message"]
    assert "straggler: worker:1 on localhost: starved of CPU" in job.stderr
    assert last_health["stragglers"] == ["worker:1"] and "starved" in last_health["held_back_by"]
    assert "worker:1 on localhost: starved of CPU" in run_status(tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [(s["task"], s["cause"]) for s in summary["health"]["stragglers"]] == [
        ("worker:1", "starved")]


def test_a_task_with_more_work_per_step_is_named(tmp_path: Path) -> None:
    spec = lockstep_job(tmp_path, "--busy-task", "worker:1", "--busy-ms", "20")
    with running(["run", str(spec)], tmp_path / "run", tmp_path) as job:
        job.wait_event(by("task_started", task="worker:1"), timeout=60)
        named = job.wait_event(by("task_straggling", straggling=True), timeout=120)
        started = min(e["ts"] for e in job.events() if e["event"] == "task_started")
        stop(job)
    assert named["task"] == "worker:1" and named["cause"] == "more_work", named
    # judged once settled (no step reports): within the settle time and the detection time
    assert named["ts"] - started <= LOCKSTEP_SETTLE_S + DETECTION_S
    assert named["cpu_cores"] >= 1.5 * named["others_cpu_cores"]
    assert "worker:1 on localhost does" in named["message"] and "the others' work per step" \
        in named["message"]
    assert not [e for e in job.events() if e["event"] == "task_straggling"
                and e["task"] != "worker:1"]
