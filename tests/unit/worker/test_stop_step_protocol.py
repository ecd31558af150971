"""The task's side of the coordinator's stop step, without TensorFlow: a training loop whose
``PreemptionWatcher`` has a strategy (so it would join a collective) but runs under tfcluster (a
control pipe), driven by this test acting as the agent and coordinator. Real processes, signals
and pipes; no collective runs."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.jobs import REPO
from worker.wire.control import encode_stop_at
from worker.wire.env import CONTROL_FD, REPORT_FD

pytestmark = pytest.mark.timeout(60)

LOOP = """
import sys, time
from worker.preemption import PreemptionWatcher

class NoCollectives:  # a collective would fail: the coordinator's step needs none
    def run(self, *args, **kwargs):
        raise AssertionError("a collective ran")

watcher = PreemptionWatcher(NoCollectives())
watcher.install()
for step in range(1, 100000):
    time.sleep(0.002)
    if step == 10:
        print("ready", flush=True)
    if watcher.should_stop(step):
        print(f"stop {step}", flush=True)
        sys.exit(143)
"""


class Task:
    """One loop process with a report pipe and a control pipe, as an agent gives them."""

    def __init__(self, tmp_path: Path, prelude: str = "") -> None:
        script = tmp_path / "loop.py"
        script.write_text(prelude + textwrap.dedent(LOOP))
        self.report_r, report_w = os.pipe()
        control_r, self.control_w = os.pipe()
        env = {**os.environ, REPORT_FD: str(report_w), CONTROL_FD: str(control_r)}
        self.proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     pass_fds=(report_w, control_r))
        os.close(report_w)
        os.close(control_r)
        self.pending = b""
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "ready\n"

    def next_report(self, timeout_s: float = 10.0) -> dict[str, object]:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            assert left > 0, "no report in time"
            ready, _, _ = select.select([self.report_r], [], [], left)
            if ready:
                chunk = os.read(self.report_r, 4096)
                assert chunk, "the task closed its report pipe"
                self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        message: dict[str, object] = json.loads(line)
        return message

    def finish(self) -> tuple[int, str, str]:
        try:
            out, err = self.proc.communicate(timeout=20)
        finally:
            self.proc.kill()
            os.close(self.report_r)
            os.close(self.control_w)
        return self.proc.returncode, out, err


def test_the_task_that_got_the_notice_holds_until_the_coordinator_sends_the_step(
        tmp_path: Path) -> None:
    task = Task(tmp_path)
    task.proc.send_signal(signal.SIGTERM)
    notice = task.next_report()
    assert notice["kind"] == "preemption_notice"
    held_at = notice["step"]
    assert isinstance(held_at, int) and held_at >= 10
    assert task.proc.poll() is None  # holding, not gone
    os.write(task.control_w, encode_stop_at(held_at + 1))
    assert task.next_report() == {"kind": "stop_ack", "step": held_at + 1}
    code, out, err = task.finish()
    assert code == 143, err
    assert out.split()[-2:] == ["stop", str(held_at + 1)]  # one step more, then the stop


def test_a_task_told_the_step_stops_there_without_a_notice_of_its_own(tmp_path: Path) -> None:
    task = Task(tmp_path)
    os.write(task.control_w, encode_stop_at(10_000_000))  # far ahead: the loop runs on ...
    assert task.next_report() == {"kind": "stop_ack", "step": 10_000_000}
    assert task.proc.poll() is None
    os.write(task.control_w, b"garbage\n" + encode_stop_at(40))  # ... the earliest step counts
    assert task.next_report() == {"kind": "stop_ack", "step": 40}
    code, out, err = task.finish()
    assert code == 143, err
    assert "ignored a control line" in err
    stopped = int(out.split()[-1])
    assert stopped >= 40  # at once: it was past 40 already, or at 40 exactly


def test_without_an_answer_the_holding_task_gives_up_without_claiming_a_checkpoint(
        tmp_path: Path) -> None:
    task = Task(tmp_path, prelude="import worker.preemption as p\np.STOP_STEP_TIMEOUT_S = 1.5\n")
    task.proc.send_signal(signal.SIGTERM)
    assert task.next_report()["kind"] == "preemption_notice"
    code, out, err = task.finish()
    assert code == -signal.SIGTERM  # not 143: nothing was saved
    assert "stop" not in out
    assert "no stop step from tfcluster's coordinator within 1.5s of SIGTERM" in err
