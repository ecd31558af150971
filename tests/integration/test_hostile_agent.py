"""The agent against hostile or unlucky circumstances (issue 25, items 2, 7, 9 and 12): a process
table forged to aim tfcluster at a stranger is ignored and said so; an agent killed at any moment
after a launch leaves no process of its tasks behind; warm spares stopped with SIGSTOP never hold
the agent's loop up; a coordinator stopped (Ctrl-Z) for longer than the heartbeat timeout costs
the job nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.agent_harness import CHILD, agent, gone, wait_for
from tests.support.jobs import (
    by,
    fake_spec,
    latest_step,
    running,
    wait_for_checkpoint,
    wait_until_gone,
    write_spec,
)
from tests.support.procs import alive, kill_all, wait_until_empty
from worker.wire.process_identity import read_stat
from worker.wire.process_mark import process_mark
from worker.wire.process_table import kill_recorded, write_table
from worker.wire.protocol import Heartbeat, Launch, Started, TaskLaunch, Terminate, Terminated

pytestmark = pytest.mark.timeout(60)

HOST = "localhost"


@pytest.fixture
def leftovers() -> Iterator[list[psutil.Process]]:
    """Processes started outside any agent's reach: killed at the end whatever happens."""
    procs: list[psutil.Process] = []
    yield procs
    kill_all(procs, timeout=None)
    wait_until_empty(lambda: alive(procs), timeout=5)


def stranger(leftovers: list[psutil.Process]) -> subprocess.Popen[bytes]:
    """What the user started themself (``setsid sleep``): no process of any tfcluster job."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            start_new_session=True)
    leftovers.append(psutil.Process(proc.pid))
    return proc


def sleeper_launch(tmp_path: Path, table: Path, attempt: int = 0) -> Launch:
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    return Launch(job="t", attempt=attempt, heartbeat_interval_s=0.2, process_table=str(table),
                  process_mark=process_mark(str(tmp_path / "run"), HOST),
                  tasks=[TaskLaunch(task="worker:0", argv=[sys.executable, str(script)], env={},
                                    cwd=str(tmp_path))])


# --- item 2: a forged process table ---------------------------------------------------------------


def test_a_new_agent_ignores_a_table_that_names_a_stranger_and_says_so_once(
        tmp_path: Path, leftovers: list[psutil.Process]) -> None:
    victim = stranger(leftovers)
    stat = read_stat(victim.pid)
    assert stat is not None
    table = tmp_path / "run" / "agents" / f"{HOST}.processes.json"
    write_table(table, [stat, stat])  # what a task that knows TFCLUSTER_RUN_DIR can write
    with agent(sleeper_launch(tmp_path, table)) as a:
        a.next_of(Started)
        a.close_input()
        assert a.proc.wait(10) == 0
        log = a.stderr
    assert victim.poll() is None, "a process named only by the run dir was killed"
    assert psutil.Process(victim.pid).status() != psutil.STATUS_STOPPED
    assert log.count("do not carry this run's mark") == 1, log


def test_the_coordinators_cleanup_spares_a_stranger_named_by_the_table(
        tmp_path: Path, leftovers: list[psutil.Process]) -> None:
    victim = stranger(leftovers)
    stat = read_stat(victim.pid)
    assert stat is not None
    table = tmp_path / "table.json"
    write_table(table, [stat])
    cleared = kill_recorded(table, process_mark(str(tmp_path / "run"), HOST))
    assert cleared.killed == [] and cleared.unproven == 1
    assert kill_recorded(table, None).killed == []  # no mark known: nothing is proven
    assert victim.poll() is None


def test_a_stranger_carrying_another_runs_mark_is_spared(
        tmp_path: Path, leftovers: list[psutil.Process]) -> None:
    other = process_mark(str(tmp_path / "other-run"), HOST)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            start_new_session=True, env={**os.environ,
                                                         "TFCLUSTER_PROCESS_MARK": other})
    leftovers.append(psutil.Process(proc.pid))
    stat = read_stat(proc.pid)
    assert stat is not None
    table = tmp_path / "table.json"
    write_table(table, [stat])
    assert kill_recorded(table, process_mark(str(tmp_path / "run"), HOST)).killed == []
    assert kill_recorded(table, process_mark(str(tmp_path / "run"), "other-host")).killed == []
    assert proc.poll() is None


# --- item 12: the agent killed right after a launch -------------------------------------------------

#: Starts a child that double-forks a grandchild into a session of its own, says "ready" once
#: both exist, and sleeps.
SPAWNER = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
while not os.path.exists(os.path.join(sys.argv[2], "grandchild")):
    time.sleep(0.005)
print("ready", flush=True)
time.sleep(600)
"""


def spawner_launch(tmp_path: Path, table: Path) -> Launch:
    script = tmp_path / "spawner.py"
    script.write_text(SPAWNER)
    task = TaskLaunch(task="worker:0", argv=[sys.executable, str(script), CHILD, str(tmp_path)],
                      env={"PYTHONUNBUFFERED": "1"}, cwd=str(tmp_path))
    # a long heartbeat interval: the table is not rewritten between the start and the kill
    return Launch(job="t", attempt=0, heartbeat_interval_s=30.0, process_table=str(table),
                  process_mark=process_mark(str(tmp_path / "run"), HOST), tasks=[task])


def kill_agent_once_its_task_forked(tmp_path: Path, table: Path,
                                    leftovers: list[psutil.Process]) -> list[int]:
    """SIGKILL the agent the moment its task's children exist; the (task, child, grandchild)."""
    with agent(spawner_launch(tmp_path, table)) as a:
        task = a.next_of(Started).pid
        wait_for(lambda: all((tmp_path / n).exists() for n in ("child", "grandchild")), 10)
        os.kill(a.proc.pid, signal.SIGKILL)
        a.proc.wait()
    pids = [task, *(int((tmp_path / name).read_text()) for name in ("child", "grandchild"))]
    leftovers.extend(psutil.Process(pid) for pid in pids if psutil.pid_exists(pid))
    return pids


def test_an_agent_killed_right_after_the_launch_leaves_nothing_after_the_cleanup(
        tmp_path: Path, leftovers: list[psutil.Process]) -> None:
    table = tmp_path / "agents" / f"{HOST}.processes.json"
    pids = kill_agent_once_its_task_forked(tmp_path, table, leftovers)
    cleared = kill_recorded(table, process_mark(str(tmp_path / "run"), HOST))  # the coordinator's
    assert set(pids[1:]) <= set(cleared.killed), cleared
    assert gone(pids, 5), "a process of the task outlived its killed agent and the cleanup"


def test_the_next_agent_ends_what_a_killed_one_left_right_after_its_launch(
        tmp_path: Path, leftovers: list[psutil.Process]) -> None:
    table = tmp_path / "agents" / f"{HOST}.processes.json"
    pids = kill_agent_once_its_task_forked(tmp_path, table, leftovers)
    with agent(sleeper_launch(tmp_path, table, attempt=1)) as a:
        a.next_of(Started)
        assert gone(pids, 0), "leftovers still alive when the new task started"


# --- item 9: warm spares stopped while they wait -----------------------------------------------------


def spare_launch(tmp_path: Path, attempt: int, tasks: int) -> Launch:
    script = tmp_path / "task.py"
    script.write_text("import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    return Launch(job="t", attempt=attempt, heartbeat_interval_s=0.2, preload=["json"],
                  startup_concurrency=0,
                  spare_fill_delay_s=0.0, tasks=[
                      TaskLaunch(task=f"worker:{i}", env={"PYTHONUNBUFFERED": "1"},
                                 argv=[sys.executable, "-m", "worker.runtime.bootstrap",
                                       str(script)], cwd=str(tmp_path))
                      for i in range(tasks)])


def test_stopped_spares_are_started_cold_at_once_and_heartbeats_go_on(tmp_path: Path) -> None:
    tasks = 3
    with agent(spare_launch(tmp_path, 0, tasks)) as a:
        firsts = {a.next_of(Started, task=f"worker:{i}").pid for i in range(tasks)}
        wait_for(lambda: a.stderr.count(" ready in ") >= tasks, 30)
        spares = [p for p in psutil.Process(a.proc.pid).children() if p.pid not in firsts]
        assert len(spares) == tasks
        for spare in spares:
            spare.send_signal(signal.SIGSTOP)
        a.send(Terminate(grace_period_s=1.0))
        a.next_of(Terminated, timeout=10)
        asked = time.monotonic()
        a.send(spare_launch(tmp_path, 1, tasks))
        started = [a.next_of(Started, task=f"worker:{i}", timeout=10) for i in range(tasks)]
        took = time.monotonic() - asked
        assert all(not s.warm and "stopped" in (s.cold_reason or "") for s in started), started
        assert took < 4.0, f"the launch waited {took:.1f}s on stopped spares"
        a.next_of(Heartbeat, timeout=5)
        assert gone([s.pid for s in spares], 5), "a stopped spare was left behind"


# --- item 7: the coordinator stopped (Ctrl-Z) for longer than the heartbeat timeout ---------------


def test_a_job_survives_its_coordinator_stopped_longer_than_the_heartbeat_timeout(
        tmp_path: Path) -> None:
    timeout_s = 1.5
    checkpoints = tmp_path / "ckpt"
    spec = fake_spec("suspend", args=["--steps", "300", "--step-time", "0.02",
                                      "--checkpoint-every", "10"],
                     tasks=[{"type": "chief"}, {"type": "worker", "count": 1}],
                     checkpoint={"dir": str(checkpoints)},
                     health={"grace_period_s": 3, "heartbeat_interval_s": 0.2,
                             "heartbeat_timeout_s": timeout_s})
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        job.wait_event(by("task_progress"))
        job.proc.send_signal(signal.SIGSTOP)  # what Ctrl-Z does to a foreground tfcluster
        stopped_at = time.monotonic()
        try:  # well past the heartbeat timeout, the tasks still go on: they save again
            wait_for(lambda: time.monotonic() > stopped_at + 2 * timeout_s, 10)
            wait_for_checkpoint(checkpoints, latest_step(checkpoints) + 20, job, timeout=30)
        finally:
            job.proc.send_signal(signal.SIGCONT)  # fg
        assert job.wait(60) == 0, job.stderr
        events = job.events()
    assert [e for e in events if e["event"] in ("task_failed", "job_restarting")] == []
    assert {e["attempt"] for e in events if e["event"] == "task_started"} == {0}
    assert "lost contact" not in job.stderr and "sent nothing" not in job.stderr
    log = (tmp_path / "run" / "agents" / f"{HOST}.log").read_text()
    assert "it is stopped (Ctrl-Z?), not gone" in log, log


def test_a_job_whose_agent_is_killed_right_after_the_launch_leaves_no_process(
        tmp_path: Path) -> None:
    spec = fake_spec("killed-agent", args=["--steps", "10000", "--step-time", "0.05",
                                           "--spawn-child", "--spawn-daemon"],
                     tasks=[{"type": "worker", "count": 1}],
                     health={"grace_period_s": 1, "heartbeat_interval_s": 20,
                             "heartbeat_timeout_s": 60})  # no rewrite of the table meanwhile
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        job.wait_event(by("task_progress"))  # the task's child and daemon exist by now
        agents = psutil.Process(job.proc.pid).children()
        assert len(agents) == 1
        agents[0].kill()
        assert job.wait(60) != 0
        left = wait_until_gone(job.mark, timeout=10)
    assert left == [], f"left behind: {[p.cmdline() for p in alive(left)]}"
