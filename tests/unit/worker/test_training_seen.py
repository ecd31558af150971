"""When the warm spares are filled for scripts that never report a step: every task of the host
past its start-up, i.e. its main thread's demand for a CPU settled after a busy window
(``worker.agent.spares.training_seen``). Quiet from the start is not settled: a task started from
a spare first waits for its peers, before its start-up work."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from worker.agent.spares.training_seen import (
    MIN_RUN_S,
    SAMPLE_EVERY_S,
    StartupWatch,
    _Task,
    demand_seconds,
)


def series(task: _Task, rates: list[float], start: float = 0.0) -> list[bool]:
    """``task.settled`` at each sample, the main thread demanding ``rates`` cores in turn."""
    demand, now, said = 0.0, start, []
    for rate in rates:
        now += SAMPLE_EVERY_S
        demand += rate * SAMPLE_EVERY_S
        said.append(task.settled(now, demand))
    return said


def test_busy_then_quiet_is_settled_once_the_window_is_quiet() -> None:
    said = series(_Task(pid=1, started=0.0), [1.0] * 8 + [0.05] * 8)
    assert not any(said[:10])  # importing, then the window still holds busy samples
    assert said[-1]


def test_quiet_from_the_start_is_never_settled() -> None:
    """A warm task waiting for its peers (or a connection retry) is not past its start-up."""
    assert not any(series(_Task(pid=1, started=0.0), [0.02] * 40))


def test_quiet_then_busy_then_quiet_settles_after_the_busy_window() -> None:
    task = _Task(pid=1, started=0.0)
    said = series(task, [0.02] * 8 + [1.0] * 6 + [0.05] * 8)
    assert not any(said[:14]) and said[-1]


def test_busy_throughout_is_never_settled() -> None:
    assert not any(series(_Task(pid=1, started=0.0), [0.9] * 40))


def test_settled_only_after_the_minimum_run() -> None:
    quick = round(MIN_RUN_S / SAMPLE_EVERY_S)  # the sample at MIN_RUN_S
    said = series(_Task(pid=1, started=0.0), [1.0] * 3 + [0.0] * (quick - 3))
    assert not any(said[:-1]) and said[-1]


@pytest.mark.timeout(30)
def test_real_processes_a_sleeper_never_settles_a_worker_that_spun_does() -> None:
    """Real processes and /proc/PID/schedstat: one spins on its main thread for a second then
    sleeps, the other sleeps from the start; only the first is ever past its start-up."""
    code = "import sys,time\nend=time.time()+float(sys.argv[1])\nwhile time.time()<end: pass\n" \
           "time.sleep(60)"
    spun = subprocess.Popen([sys.executable, "-c", code, "1.0"])
    quiet = subprocess.Popen([sys.executable, "-c", code, "0"])
    try:
        assert demand_seconds(spun.pid) is not None
        watches = {name: StartupWatch() for name in ("spun", "quiet")}
        now = time.monotonic()
        watches["spun"].started("worker:0", spun.pid, now)
        watches["quiet"].started("worker:0", quiet.pid, now)
        seen = {"spun": False, "quiet": False}
        deadline = now + 8.0
        while time.monotonic() < deadline and not seen["spun"]:
            time.sleep(SAMPLE_EVERY_S)  # the agent's own sampling period, not a synchronisation
            now = time.monotonic()
            seen["spun"] = watches["spun"].look(now, {spun.pid})
            seen["quiet"] = seen["quiet"] or watches["quiet"].look(now, {quiet.pid})
        assert seen == {"spun": True, "quiet": False}
    finally:
        for process in (spun, quiet):
            process.kill()
            process.wait(timeout=10)


@pytest.mark.timeout(30)
def test_a_task_that_exited_keeps_the_others_from_being_past_their_start_up() -> None:
    """Its peer died: the survivor's quiet is its wait in a collective that will never end, not
    training (spares filled then were discarded at the restart 0.1 s later)."""
    code = "import sys,time\nend=time.time()+float(sys.argv[1])\nwhile time.time()<end: pass\n" \
           "time.sleep(60)"
    survivor = subprocess.Popen([sys.executable, "-c", code, "1.0"])
    died = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        died.wait(timeout=10)
        watch, alone = StartupWatch(), StartupWatch()
        now = time.monotonic()
        for one in (watch, alone):
            one.started("worker:0", survivor.pid, now)
        watch.started("worker:1", died.pid, now)
        seen = {"alone": False, "with the dead one": False}
        deadline = now + 8.0
        while time.monotonic() < deadline and not seen["alone"]:
            time.sleep(SAMPLE_EVERY_S)  # the agent's own sampling period, not a synchronisation
            now = time.monotonic()
            seen["alone"] = alone.look(now, {survivor.pid})
            seen["with the dead one"] = seen["with the dead one"] \
                or watch.look(now, {survivor.pid})
        assert seen == {"alone": True, "with the dead one": False}
    finally:
        survivor.kill()
        survivor.wait(timeout=10)
