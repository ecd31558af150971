"""Pieces shared by the whole-job supervision tests, local (tests/integration/test_supervision.py)
and over SSH (tests/ssh/test_ssh_supervision.py): a task that exits early so a stranger can take
its pid, and tasks that leave double-forked grandchildren behind when their agent is SIGKILLed."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from tests.integration.test_agent_pid_reuse import spawn_with_pid
from tests.support import procs
from tests.support.jobs import Job, by, running, write_spec
from worker.wire.process_table import read_table

#: worker:0 exits 0 at once; worker:1 waits for the go file, then exits 0.
EARLY_EXIT = """\
import os, sys, time
if os.environ["TFCLUSTER_TASK"] == "worker:1":
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
"""

#: Every task leaves a grandchild (double fork, own session) that sleeps; in attempt 0 the tasks
#: then wait forever (their agent will be killed), later they exit 0.
GRANDCHILDREN = """\
import os, sys, time
attempt, task = os.environ["TFCLUSTER_ATTEMPT"], os.environ["TFCLUSTER_TASK"]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(os.path.join(sys.argv[1], f"grandchild-{attempt}-{task}"), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
    os._exit(0)
os.wait()
if attempt == "0":
    time.sleep(600)
"""


def check_stranger_untouched(tmp_path: Path, spec: dict[str, Any], go: Path) -> Job:
    """Run ``spec`` (EARLY_EXIT tasks waiting for ``go``); once worker:0 has exited, give a
    stranger its pid, let the job end, and check the stranger got no signal at all."""
    signals = tmp_path / "stranger-signals"
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        pid = job.wait_event(by("task_started", task="worker:0"))["pid"]
        job.wait_event(by("task_exited", task="worker:0", exit_code=0))
        stranger = spawn_with_pid(pid, signals)
        try:
            go.touch()
            assert job.wait() == 0, job.stderr
            caught = signals.read_text().split() if signals.exists() else []
            assert (stranger.poll(), caught) == (None, [])
        finally:
            stranger.kill()
            stranger.wait()
    return job


def entrypoint(tmp_path: Path, name: str, source: str, arg: Path) -> dict[str, Any]:
    script = tmp_path / f"{name}.py"
    script.write_text(source)
    return {"command": [sys.executable, str(script), str(arg)]}


def grandchild_pids(directory: Path, attempt: int) -> list[int]:
    return [int(p.read_text()) for p in sorted(directory.glob(f"grandchild-{attempt}-*"))
            if p.read_text()]


def wait_recorded(table: Path, pids: list[int], timeout: float = 15) -> None:
    """Wait until the agent's process table lists every one of ``pids``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if table.exists():
            try:
                recorded = {r.pid for r in read_table(table)}
            except (OSError, ValueError, json.JSONDecodeError):
                recorded = set()
            if set(pids) <= recorded:
                return
        time.sleep(0.05)
    raise AssertionError(f"{pids} not recorded in {table} within {timeout}s")


def wait_files(directory: Path, pattern: str, count: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in directory.glob(pattern) if p.read_text()]
        if len(found) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} {pattern} in {directory} after {timeout}s")


def agent_processes(candidates: list[psutil.Process]) -> list[psutil.Process]:
    found = []
    for proc in candidates:
        try:
            if "worker.agent" in proc.cmdline():
                found.append(proc)
        except psutil.Error:
            continue
    return found


def alive_pids(pids: list[int]) -> list[int]:
    return [p.pid for p in procs.alive(procs.by_pid(pids))]
