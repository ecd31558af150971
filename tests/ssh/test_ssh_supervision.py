"""The supervision guarantees of tests/integration/test_supervision.py over a real SSH connection:
a remote stranger with an exited task's pid is left alone, the grandchildren a SIGKILLed remote
agent left are killed by the next agent on that host before it starts the next attempt, and a
Ctrl-Z of tfcluster longer than the heartbeat timeout is survived by its remote tasks; and a
SIGTERM to one remote task of a lock-step job stops every task after the step tfcluster chose,
its messages going through the remote agents."""

from __future__ import annotations

import os
import pwd
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from launcher.plan.planner import remote_process_table
from tests.ssh.remote import SSH_HOST, SshSetup, processes_with
from tests.ssh.sshd import free_port
from tests.support import supervision as sv
from tests.support.jobs import by, latest_step, running, wait_for_checkpoint, write_spec
from tests.support.tiers import require
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(120)]


def test_a_remote_stranger_with_an_exited_tasks_pid_is_not_signalled(
        tmp_path: Path, ssh: SshSetup) -> None:
    require(os.geteuid() == 0, "forcing pid reuse through ns_last_pid needs root")
    go = tmp_path / "go"
    spec = ssh.spec("sshreuse", entrypoint=sv.entrypoint(tmp_path, "early", sv.EARLY_EXIT, go))
    sv.check_stranger_untouched(tmp_path, spec, go)


def test_the_next_agent_kills_what_a_killed_remote_agent_left(tmp_path: Path,
                                                               ssh: SshSetup) -> None:
    spec = ssh.spec("sshorphans",
                    entrypoint=sv.entrypoint(tmp_path, "gc", sv.GRANDCHILDREN, tmp_path),
                    restart={"max_restarts": 1, "backoff_s": 0.1})
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        sv.wait_files(tmp_path, "grandchild-0-*", 2)
        orphans = sv.grandchild_pids(tmp_path, 0)
        table = remote_process_table(str(tmp_path / "run"), SSH_HOST).replace(
            "~", pwd.getpwuid(os.getuid()).pw_dir, 1)  # the ssh login's home, not this test's
        sv.wait_recorded(Path(table), orphans)
        tasks = [p for p in processes_with(ssh.mark) if "gc.py" in " ".join(p.cmdline())]
        agent, = sv.agent_processes(list({p.parent() for p in tasks} - {None}))
        agent.kill()
        assert job.wait() == 0, job.stderr  # lost host, then attempt 1 succeeds
        assert sv.alive_pids(orphans) == []
        assert job.wait_event(by("task_failed", attempt=0))["kind"] == "lost_host"


def test_remote_tasks_go_on_through_a_ctrl_z_longer_than_the_heartbeat_timeout(
        tmp_path: Path, ssh: SshSetup) -> None:
    """The remote agent cannot see its coordinator stopped: tfcluster tells it before it stops."""
    timeout_s = 1.5
    checkpoints = tmp_path / "ckpt"
    spec = ssh.spec("sshsuspend", args=["--steps", "300", "--step-time", "0.02",
                                        "--checkpoint-every", "10"],
                    tasks=[{"type": t, "host": SSH_HOST, "port": free_port()}
                           for t in ("chief", "worker")],
                    checkpoint={"dir": str(checkpoints)},
                    health={"grace_period_s": 3, "heartbeat_interval_s": 0.2,
                            "heartbeat_timeout_s": timeout_s})
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        job.wait_event(by("task_progress"))
        job.proc.send_signal(signal.SIGTSTP)  # what Ctrl-Z sends a foreground tfcluster
        wait_until(lambda: stopped(job.proc.pid), 10, "tfcluster stopped")
        stopped_at = time.monotonic()
        try:  # well past the heartbeat timeout, the remote tasks still go on: they save again
            wait_until(lambda: time.monotonic() > stopped_at + 2 * timeout_s, 10,
                       "twice the heartbeat timeout")
            wait_for_checkpoint(checkpoints, latest_step(checkpoints) + 20, job, timeout=30)
            assert stopped(job.proc.pid), "tfcluster ran meanwhile"
        finally:
            job.proc.send_signal(signal.SIGCONT)  # fg
        assert job.wait(60) == 0, job.stderr
        events = job.events()
    assert [e for e in events if e["event"] in ("task_failed", "job_restarting")] == []
    assert {e["attempt"] for e in events if e["event"] == "task_started"} == {0}
    assert re.search(r"tfcluster: stopped for \d+s \(Ctrl-Z\); the tasks went on", job.stderr), job.stderr
    log = (tmp_path / "run" / "agents" / f"{SSH_HOST}.log").read_text()
    assert "being stopped (Ctrl-Z)" in log and "runs again" in log, log


def stopped(pid: int) -> bool:
    return psutil.Process(pid).status() == psutil.STATUS_STOPPED


LOCKSTEP = Path(__file__).parents[1] / "support" / "lockstep_watcher.py"
_STOPPED = re.compile(r"lockstep (\S+): stopped after step (\d+)")


def test_a_sigterm_to_one_remote_task_stops_every_task_after_one_step_chosen_by_tfcluster(
        tmp_path: Path, ssh: SshSetup) -> None:
    """The stop step's messages go through the remote agents (StopAt, the control pipes)."""
    checkpoints = tmp_path / "ckpt"
    spec = ssh.spec("sshstop", workers=3,
                    entrypoint={"script": str(LOCKSTEP), "args": ["--steps", "120",
                                                                  "--step-time", "0.02"]},
                    checkpoint={"dir": str(checkpoints)},
                    restart={"max_restarts": 0, "backoff_s": 0.1})
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        job.wait_event(lambda e: e["event"] == "task_progress" and e["step"] >= 20, timeout=60)
        pid = job.wait_event(by("task_started", task="worker:1", attempt=0))["pid"]
        os.kill(pid, signal.SIGTERM)  # the sshd is this machine's: so is the remote task
        assert job.wait(60) == 0, job.stderr
        events = job.events()
    logs = "".join((tmp_path / "run" / "attempt-0").joinpath(f"worker-{i}.log").read_text()
                   for i in range(3))
    stopped = dict(_STOPPED.findall(logs))
    assert set(stopped) == {"worker:0", "worker:1", "worker:2"} and len(set(stopped.values())) == 1
    step = int(stopped["worker:0"])
    assert re.search(rf"worker:1 got a preemption notice after step {step - 1}: every task "
                     rf"saves after step {step} and stops", job.stderr), job.stderr
    restart = next(e for e in events if e["event"] == "job_restarting")
    assert restart["resume_step"] == step and restart["counts_against_budget"] is False
    assert events[-1]["event"] == "job_succeeded"
