"""Out of memory, named, with real kernels and processes: a task that allocates until the kernel's
OOM killer takes it (inside a cgroup v1 memory cgroup with a 64 MiB limit that the test creates and
removes) and a task that passes ``health.memory_limit_mib`` (killed by tfcluster) are reported as
out of memory with their peak RSS and what to do, on the console, in events and in ``status``."""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.health_jobs import health_spec
from tests.support.jobs import REPO, by, run_status, running, write_spec
from tests.support.tiers import skip_tier

pytestmark = pytest.mark.timeout(120)

MEMORY_ROOT = Path("/sys/fs/cgroup/memory")
LIMIT_MIB = 64

#: Joins the cgroup named by its first argument, then allocates 8 MiB at a time (touched) until
#: the kernel kills it.
GREEDY = textwrap.dedent("""\
    import os, sys, time
    with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as procs:
        procs.write(str(os.getpid()))
    print("joined", sys.argv[1], flush=True)
    held = []
    while True:
        held.append(bytearray(b"\\x01" * (8 << 20)))
        time.sleep(0.01)
""")


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    if not (MEMORY_ROOT / "cgroup.procs").exists():
        skip_tier("needs the cgroup v1 memory controller at /sys/fs/cgroup/memory")
    group = MEMORY_ROOT / f"tfcluster-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(LIMIT_MIB << 20))
        yield group
    finally:
        # every task of the job is gone by now (the job waited for them); what is left is moved
        # out so that the directory can go
        for pid in (group / "cgroup.procs").read_text().split():
            (MEMORY_ROOT / "cgroup.procs").write_text(pid)
        group.rmdir()



def test_a_task_the_kernel_oom_kills_in_its_cgroup_is_reported_out_of_memory(
        tmp_path: Path, memory_cgroup: Path) -> None:
    script = tmp_path / "greedy.py"
    script.write_text(GREEDY)
    job_spec = {"name": "greedy", "entrypoint": {"script": str(script),
                                                 "args": [str(memory_cgroup)]},
                "tasks": [{"type": "worker", "count": 1}],
                "restart": {"max_restarts": 0}}
    with running(["run", str(write_spec(tmp_path, job_spec))], tmp_path / "run", REPO) as job:
        assert job.wait(60) == 128 + 9, job.stderr
        failed = job.wait_event(by("task_failed", task="worker:0"))
    assert failed["kind"] == "out_of_memory" and failed["signal"] == "SIGKILL"
    message = failed["message"]
    assert (f"killed by the kernel's out-of-memory killer (its memory cgroup's {LIMIT_MIB} MiB "
            "limit; peak RSS ") in message
    peak_mib = int(message.split("peak RSS ", 1)[1].split(" MiB", 1)[0])
    # stopped at the limit; its RSS also holds what it had before it joined (the interpreter),
    # charged to the cgroup it came from
    assert LIMIT_MIB - 16 <= peak_mib <= LIMIT_MIB + 32
    assert "mixed_float16" in message
    root = job.stderr.split("Root cause", 1)[1].splitlines()[0]
    assert "worker:0 on localhost (attempt 0) ran out of memory: killed by the kernel's" in root
    assert "ran out of memory" in run_status(tmp_path / "run")


def test_a_task_past_memory_limit_mib_is_stopped_and_reported_out_of_memory(
        tmp_path: Path) -> None:
    args = ["--duration", "30", "--grow-task", "worker:1", "--grow-mib", "300"]
    job_spec = health_spec("capped", args, memory_limit_mib=200, memory_warn_ratio=0.5,
                           heartbeat_interval_s=0.2, heartbeat_timeout_s=5)
    with running(["run", str(write_spec(tmp_path, job_spec))], tmp_path / "run", REPO) as job:
        grown = job.wait_event(by("task_progress", task="worker:1"))
        assert job.wait(60) == 128 + 9, job.stderr
    failed = [e for e in job.events() if e["event"] == "task_failed"]
    assert [e["task"] for e in failed] == ["worker:1"], failed
    assert failed[0]["kind"] == "out_of_memory"
    assert "stopped by tfcluster, its RSS passed health.memory_limit_mib (200 MiB" \
        in failed[0]["message"]
    assert failed[0]["died_at"] >= grown["ts"]
    assert "worker:1 passed health.memory_limit_mib" in job.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["root_cause"]["kind"] == "out_of_memory"
    # past the limit: killed at the heartbeat that saw it, while its 300 MiB were still filling
    assert summary["health"]["tasks"]["worker:1"]["peak_rss_bytes"] > 200 << 20
