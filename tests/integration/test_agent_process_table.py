"""Killing an agent must not orphan its tasks' processes: the task dies with its agent
(``PR_SET_PDEATHSIG``), and everything below it is in the agent's process table, which
``kill_recorded`` (the coordinator's call, or the next agent's) uses to end it. And a table never
makes anyone kill a stranger that merely shares a pid or a session id."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.agent_harness import CHILD, agent, gone, wait_for
from tests.support.procs import alive, kill_all, wait_until_empty
from worker.wire.env import PROCESS_MARK
from worker.wire.process_identity import ProcStat, read_stat
from worker.wire.process_mark import process_mark
from worker.wire.process_table import (
    Cleared,
    ProcessTableError,
    kill_recorded,
    read_table,
    write_table,
)
from worker.wire.protocol import Launch, Started, TaskLaunch

pytestmark = pytest.mark.timeout(60)

#: Starts CHILD, then sleeps.
TASK = """
import subprocess, sys, time
subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]])
print("ready", flush=True)
time.sleep(600)
"""
SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"


def mark_of(tmp_path: Path) -> str:
    """The mark of this test's job (what the coordinator sends in the launch): its own, so that
    a test running at the same time on another xdist worker never finds its processes."""
    return process_mark(str(tmp_path / "run"), "localhost")


@pytest.fixture
def leftovers() -> Iterator[list[psutil.Process]]:
    """Processes a test started outside any agent's reach: killed at the end whatever happens."""
    procs: list[psutil.Process] = []
    yield procs
    kill_all(procs, timeout=None)
    wait_until_empty(lambda: alive(procs), timeout=5)


def recorded(table: Path) -> set[int]:
    with contextlib.suppress(ProcessTableError):
        return {r.pid for r in read_table(table)}
    return set()


def job_launch(tmp_path: Path, table: Path) -> Launch:
    task_script, child_script = tmp_path / "task.py", tmp_path / "child.py"
    task_script.write_text(TASK)
    child_script.write_text(CHILD)
    task = TaskLaunch(task="worker:0", argv=[sys.executable, str(task_script), str(child_script),
                                             str(tmp_path)], env={}, cwd=str(tmp_path))
    return Launch(job="t", attempt=0, heartbeat_interval_s=0.2, process_table=str(table),
                  process_mark=mark_of(tmp_path), tasks=[task])


def start_job_and_kill_its_agent(tmp_path: Path, table: Path,
                                 leftovers: list[psutil.Process]) -> tuple[int, int, int]:
    """Run TASK under an agent until its table lists the whole tree, then SIGKILL the agent;
    (task, child, grandchild) pids."""
    with agent(job_launch(tmp_path, table)) as a:
        task = a.next_of(Started).pid
        wait_for(lambda: (tmp_path / "grandchild").exists() and (tmp_path / "child").exists(), 10)
        child, grandchild = (int((tmp_path / name).read_text()) for name in ("child", "grandchild"))
        leftovers.extend(psutil.Process(pid) for pid in (task, child, grandchild))
        wait_for(lambda: {task, child, grandchild} <= recorded(table), 10)
        os.kill(a.proc.pid, signal.SIGKILL)
        a.proc.wait()
    return task, child, grandchild


def test_kill_recorded_ends_every_process_a_killed_agent_left(
        tmp_path: Path, leftovers: list[psutil.Process]) -> None:
    table = tmp_path / "agent.processes.json"
    task, child, grandchild = start_job_and_kill_its_agent(tmp_path, table, leftovers)
    assert gone([task], 5), "the task outlived its agent"
    assert len(alive(psutil.Process(pid) for pid in (child, grandchild))) == 2  # orphans now
    assert {child, grandchild} <= set(kill_recorded(table, mark_of(tmp_path)).killed)
    assert gone([task, child, grandchild], 5)


def test_a_new_agent_kills_what_a_dead_one_left_before_starting_its_tasks(
        tmp_path: Path, leftovers: list[psutil.Process]) -> None:
    table = tmp_path / "agent.processes.json"
    _, child, grandchild = start_job_and_kill_its_agent(tmp_path, table, leftovers)
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text(SLEEPER)
    task = TaskLaunch(task="worker:0", argv=[sys.executable, str(sleeper)], env={},
                      cwd=str(tmp_path))
    launch = Launch(job="t", attempt=1, heartbeat_interval_s=0.2, process_table=str(table),
                    process_mark=mark_of(tmp_path), tasks=[task])
    with agent(launch) as a:
        started = a.next_of(Started)
        assert gone([child, grandchild], 0), "leftovers still alive when the new task started"
        wait_for(lambda: recorded(table) == {started.pid}, 10)  # the file is the new agent's now
        a.close_input()
        assert a.proc.wait(10) == 0
        assert not table.exists()  # removed at a clean exit


#: A session leader that, once cued, forks a process that is orphaned at once, staying in its
#: session but with no parent in the table, and (execed with a clean environment) no mark.
SESSION_LEADER = """
import os, sys, time
MEMBER = (
    "import os, sys, time\\n"
    "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\\n"
    "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\\n"
    "time.sleep(600)\\n"
)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
middle = os.fork()
if middle == 0:
    if os.fork() == 0:
        clean = {k: v for k, v in os.environ.items() if k != "TFCLUSTER_PROCESS_MARK"}
        os.execve(sys.executable, [sys.executable, "-c", MEMBER, sys.argv[2]], clean)
    os._exit(0)
os.waitpid(middle, 0)
time.sleep(600)
"""


def in_own_session(leftovers: list[psutil.Process], code: str = "import time; time.sleep(600)",
                   args: tuple[str, ...] = (), mark: str | None = None) -> subprocess.Popen[bytes]:
    """A python process in a session of its own, outside any agent (the job's if ``mark``)."""
    environ = {**os.environ, **({} if mark is None else {PROCESS_MARK: mark})}
    proc = subprocess.Popen([sys.executable, "-c", code, *args], start_new_session=True,
                            env=environ)
    leftovers.append(psutil.Process(proc.pid))
    return proc


def test_kill_recorded_takes_a_recorded_session_s_later_members(
        tmp_path: Path, leftovers: list[psutil.Process]) -> None:
    cue, member_file, table = tmp_path / "go", tmp_path / "member", tmp_path / "table.json"
    leader = in_own_session(leftovers, SESSION_LEADER, (str(cue), str(member_file)),
                            mark=mark_of(tmp_path))
    stranger = in_own_session(leftovers)
    stat = read_stat(leader.pid)
    assert stat is not None
    write_table(table, [stat])
    cue.touch()
    wait_for(member_file.exists, 10)
    member = int(member_file.read_text())
    leftovers.append(psutil.Process(member))
    member_stat = read_stat(member)
    assert member_stat is not None and member_stat.sid == leader.pid
    assert member_stat.ppid != leader.pid  # reachable through its session only
    assert PROCESS_MARK not in psutil.Process(member).environ()  # not through its mark
    assert sorted(kill_recorded(table, mark_of(tmp_path)).killed) == sorted([leader.pid, member])
    leader.wait(5)
    assert gone([member], 5)
    assert stranger.poll() is None


def test_kill_recorded_spares_a_process_that_only_shares_a_pid_or_a_session_id(
        tmp_path: Path, leftovers: list[psutil.Process]) -> None:
    stranger = in_own_session(leftovers)
    stat = read_stat(stranger.pid)
    assert stat is not None
    table = tmp_path / "table.json"
    # an earlier process with the stranger's pid, in a session named like the stranger's
    write_table(table, [ProcStat(stranger.pid, 1, stranger.pid, stat.start_ticks - 1, False)])
    assert kill_recorded(table, mark_of(tmp_path)).killed == []
    # the stranger itself, but recorded during another boot
    write_table(table, [stat])
    data = json.loads(table.read_text())
    table.write_text(json.dumps({**data, "boot_id": "another-boot"}))
    assert kill_recorded(table, mark_of(tmp_path)).killed == []
    assert stranger.poll() is None
    assert kill_recorded(tmp_path / "no-such-table.json", mark_of(tmp_path)) == Cleared([])
    table.write_text("{not json")
    assert "not a process table" in (kill_recorded(table, mark_of(tmp_path)).problem or "")
    with pytest.raises(ProcessTableError, match="not a process table"):
        read_table(table)
