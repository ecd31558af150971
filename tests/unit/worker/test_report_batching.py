"""``worker.report`` batched (:mod:`worker.report_queue`): the training thread only queues; a
thread converts and writes, a newer report replacing an unsent one with the same metric names;
every other message, :func:`reporting.flush` and the interpreter's exit write what is pending
first, so the last step reported is never lost on a normal exit or an exit 143."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.waiting import wait_until
from worker import reporting
from worker.report_queue import FLUSH_INTERVAL_S
from worker.reporting import report, send
from worker.wire import env

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pipe(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    monkeypatch.setitem(reporting._state, "broken", False)
    monkeypatch.setenv(env.REPORT_FD, str(write_fd))
    reporting.flush()
    monkeypatch.setattr(reporting._queue, "_first", False)  # as after this process's first report
    yield read_fd
    reporting.flush()
    os.close(read_fd)
    os.close(write_fd)


def lines(read_fd: int) -> list[dict[str, Any]]:
    data = b""
    while True:
        try:
            chunk = os.read(read_fd, 1 << 16)
        except BlockingIOError:
            break
        data += chunk
    return [json.loads(line) for line in data.splitlines()]


class Tensor:
    """A scalar tensor: ``.numpy()``, noting the thread that read it."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.read_in: str | None = None

    def numpy(self) -> float:
        self.read_in = threading.current_thread().name
        return self.value


def test_a_newer_report_replaces_an_unsent_one_with_the_same_names(pipe: int) -> None:
    with reporting._queue._write_lock:  # the sender busy writing: reports wait for it
        for step in range(1, 101):
            report(step, loss=1.0 / step)
        report(100, val_accuracy=0.5)  # an evaluation's metrics: not replaced by a loss
        report(101, loss=0.25)
    reporting.flush()
    got = [(m["step"], m["metrics"]) for m in lines(pipe)]
    assert got == [(100, {"val_accuracy": 0.5}), (101, {"loss": 0.25})]


def test_the_first_report_of_the_process_is_never_replaced(
        pipe: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """It tells where the task began: the coordinator compares it across tasks."""
    monkeypatch.setattr(reporting._queue, "_first", True)
    with reporting._queue._write_lock:
        for step in range(1, 4):
            report(step, loss=1.0 / step)
        for names in range(100):  # more kinds of report than may wait at once
            report(4, **{f"metric_{names}": 1.0})
    reporting.flush()
    got = [m["step"] for m in lines(pipe)]
    assert got[0] == 1 and got.count(1) == 1
    assert 2 not in got and 3 not in got


def test_the_sender_writes_without_being_asked(pipe: int) -> None:
    began = time.monotonic()
    report(7, loss=Tensor(0.5))
    assert select.select([pipe], [], [], 5.0)[0], "nothing written within 5 s"
    took = time.monotonic() - began
    assert lines(pipe) == [{"kind": "progress", "step": 7, "metrics": {"loss": 0.5}}]
    assert took < 5.0


def test_tensors_are_read_by_the_sender_not_the_training_thread(pipe: int) -> None:
    loss = Tensor(0.125)
    report(3, loss=loss)
    assert loss.read_in is None  # report() returned without touching the value
    wait_until(lambda: loss.read_in is not None, 5.0, "the sender reads the tensor", poll_s=0.01)
    assert loss.read_in == "tfcluster-report"
    assert select.select([pipe], [], [], 5.0)[0]
    assert lines(pipe)[-1]["metrics"] == {"loss": 0.125}


def test_any_other_message_goes_after_the_reports_before_it(pipe: int) -> None:
    with reporting._queue._write_lock:
        report(41, loss=0.5)
        report(42, loss=0.25)
    assert send({"kind": "preempted", "step": 42}) is True
    assert [(m["kind"], m["step"]) for m in lines(pipe)] == [("progress", 42), ("preempted", 42)]


def test_a_forked_child_does_not_write_its_parents_reports(pipe: int) -> None:
    with reporting._queue._write_lock:
        report(5, loss=0.5)
        pid = os.fork()
        if pid == 0:  # the child: its queue starts empty; its own report goes out
            try:
                report(900, child=1.0)
                reporting.flush()
            finally:
                os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    reporting.flush()
    got = sorted(m["step"] for m in lines(pipe))
    assert got == [5, 900]


TRAINER = """
import sys
from worker import report
steps, code = int(sys.argv[1]), int(sys.argv[2])
for step in range(1, steps + 1):
    report(step, loss=1.0 / step)
sys.exit(code)
"""


@pytest.mark.parametrize("code", [0, 143])
def test_the_last_step_reported_is_written_when_the_script_exits(code: int) -> None:
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.run([sys.executable, "-c", TRAINER, "5000", str(code)],
                              env={**os.environ, env.REPORT_FD: str(write_fd)},
                              pass_fds=(write_fd,), timeout=25, check=False)
        os.close(write_fd)
        write_fd = -1
        data = b""
        while chunk := os.read(read_fd, 1 << 16):
            data += chunk
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    assert proc.returncode == code
    steps = [json.loads(line)["step"] for line in data.splitlines()]
    assert steps[0] == 1 and steps[-1] == 5000  # where it began, and where it ended
    assert steps == sorted(steps)
    # batched: far fewer writes than reports (one per FLUSH_INTERVAL_S, and the last at exit)
    assert len(steps) < 5000 / 10, (len(steps), FLUSH_INTERVAL_S)
