"""``PreemptionWatcher`` without TensorFlow (a lone task): the notice, the check interval, and the
watchdog that ends a task whose loop stalls after the notice. Signals go to real subprocesses."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.jobs import REPO
from worker.preemption import PreemptionWatcher

pytestmark = pytest.mark.timeout(60)

LOOP = """
import sys, threading, time
from worker.preemption import PreemptionWatcher

watcher = PreemptionWatcher(None, every={every}, timeout_s={timeout}, watchdog={watchdog})
watcher.install()
for step in range(1, 100000):
    time.sleep(0.005)
    if step == 10:
        print("ready", flush=True)
        if {stall}:
            threading.Event().wait()  # stuck, as in a collective whose peer is gone
    if watcher.should_stop(step):
        print(f"stop {{step}}", flush=True)
        sys.exit(143)
"""


def start(tmp_path: Path, *, every: int = 1, timeout: float | None = None,
          watchdog: bool = True, stall: bool = False) -> subprocess.Popen[str]:
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(LOOP.format(every=every, timeout=timeout, stall=stall,
                                                  watchdog=watchdog)))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    return proc


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    return proc.returncode, out, err


@pytest.mark.parametrize(("every", "watchdog"), [(1, True), (4, True), (1, False)])
def test_a_notice_stops_the_loop_at_the_next_checked_step(tmp_path: Path, every: int,
                                                          watchdog: bool) -> None:
    proc = start(tmp_path, every=every, watchdog=watchdog)
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc)
    assert code == 143, err
    step = int(out.split()[-1])
    assert step >= 10 and step % every == 0
    assert "got SIGTERM" in err


@pytest.mark.parametrize(("timeout", "allowance"), [(0.5, "0.5s"), (None, "2s")])
def test_a_loop_stalled_after_the_notice_dies_by_sigterm_with_its_stacks(
        tmp_path: Path, timeout: float | None, allowance: str) -> None:
    """None: the allowance adapts to the ~5 ms steps, so it is the 2 s minimum."""
    proc = start(tmp_path, timeout=timeout, stall=True)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc)
    assert code == -signal.SIGTERM  # not 143: no checkpoint was saved
    assert time.monotonic() - sent < 10
    assert "stop" not in out
    assert f"no graceful stop within {allowance} of SIGTERM" in err
    assert "most recent call first" in err and "loop.py" in err


def test_uninstall_restores_the_previous_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    watcher = PreemptionWatcher(None)
    watcher.install()
    watcher.install()  # idempotent
    assert signal.getsignal(signal.SIGTERM) is not before
    watcher.uninstall()
    watcher.uninstall()
    assert signal.getsignal(signal.SIGTERM) is before
    assert not watcher.requested and not watcher.should_stop(1)


def test_the_allowance_follows_the_slowest_recent_step() -> None:
    watcher = PreemptionWatcher(None)
    assert watcher.allowance_s == 30.0  # nothing measured yet
    watcher.should_stop(1)  # the interval after the first call (tracing) does not count
    began = time.monotonic()
    watcher.should_stop(2)
    time.sleep(0.6)
    watcher.should_stop(3)
    slowest = time.monotonic() - began
    watcher.should_stop(4)
    assert 4 * 0.6 <= watcher.allowance_s <= 4 * slowest  # above the 2 s minimum


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="every must be >= 1"):
        PreemptionWatcher(None, every=0)
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        PreemptionWatcher(None, timeout_s=0)
