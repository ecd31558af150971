"""The agent never signals a pid that is not provably its own. Once a task has exited and been
reaped, its pid (and process group id) may be given to a stranger; here a stranger gets exactly that
pid, forced through ``/proc/sys/kernel/ns_last_pid`` (root only)."""

from __future__ import annotations

import fcntl
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.agent_harness import agent, script_task
from tests.support.tiers import require
from worker.wire.protocol import (
    DumpStacks,
    Exited,
    Launch,
    Output,
    SignalTasks,
    Started,
    Terminate,
    Terminated,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _needs_root() -> None:
    require(os.geteuid() == 0, "forcing pid reuse through /proc/sys/kernel/ns_last_pid needs root")


NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")
#: Another process may take the pid between our write and our fork: try again this often.
PID_ATTEMPTS = 50

#: Its own session and group leader (start_new_session), so its pgid is the reused pid too. It
#: writes down every catchable signal it gets; SIGKILL would show as its death.
STRANGER = """
import signal, sys, time
def note(number, frame):
    with open(sys.argv[1], "a") as out:
        out.write(f"{signal.Signals(number).name}\\n")
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
            signal.SIGCONT, signal.SIGQUIT):
    signal.signal(sig, note)
print("ready", flush=True)
while True:
    time.sleep(600)
"""

IGNORES_TERM = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "print('up', flush=True)\ntime.sleep(600)\n")


def spawn_with_pid(pid: int, signals_file: Path) -> subprocess.Popen[bytes]:
    """Start :data:`STRANGER` as process ``pid`` (which must be free), ready for signals."""
    with NS_LAST_PID.open("r+b", buffering=0) as control:
        fcntl.flock(control, fcntl.LOCK_EX)  # against other tests steering pids the same way
        for _ in range(PID_ATTEMPTS):
            os.pwrite(control.fileno(), str(pid - 1).encode(), 0)
            stranger = subprocess.Popen([sys.executable, "-c", STRANGER, str(signals_file)],
                                        stdout=subprocess.PIPE, start_new_session=True)
            if stranger.pid == pid:
                break
            stranger.kill()
            stranger.wait()
        else:
            raise AssertionError(f"pid {pid} went to other processes {PID_ATTEMPTS} times")
    assert stranger.stdout is not None
    readable, _, _ = select.select([stranger.stdout], [], [], 20)
    if not readable or stranger.stdout.readline() != b"ready\n":
        stranger.kill()
        stranger.wait()
        raise AssertionError("the stranger did not get ready")
    return stranger


def test_a_reaped_task_pid_is_never_signalled_once_a_stranger_has_it(tmp_path: Path) -> None:
    quick = script_task(tmp_path, "worker:0", "")  # bootstrapped: it takes stack dump requests
    stubborn = script_task(tmp_path, "worker:1", IGNORES_TERM)  # terminate must reach SIGKILL
    signals_file = tmp_path / "stranger-signals"
    with agent(Launch(job="t", attempt=0, tasks=[quick, stubborn])) as a:
        quick_pid = a.next_of(Started, task="worker:0").pid
        assert a.next_of(Exited, task="worker:0").exit_code == 0  # reaped: its pid is free
        a.next_of(Output, task="worker:1")  # "up": it ignores SIGTERM from here on
        stranger = spawn_with_pid(quick_pid, signals_file)
        try:
            a.send(SignalTasks(signal="SIGUSR2", task="worker:0"))
            a.send(SignalTasks(signal="SIGCONT"))
            a.send(DumpStacks())
            a.send(Terminate(grace_period_s=0.5))
            assert a.next_of(Exited, task="worker:1").signal == "SIGKILL"  # the KILL stage ran
            a.next_of(Terminated)
            a.close_input()
            assert a.proc.wait(10) == 0
            caught = signals_file.read_text().split() if signals_file.exists() else []
            # (its exit status if it died, the signals it caught): the agent touched neither
            assert (stranger.poll(), caught) == (None, [])
        finally:
            stranger.kill()
            stranger.wait()
