"""What the ``test_spare_*`` modules share (no tests here): tasks started cold and warm and read
as the agent reads them, the pool driven as the agent's loop drives it, and fixtures that leave no
process behind."""

from __future__ import annotations

import contextlib
import json
import os
import select
import selectors
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psutil
import pytest

from worker.agent.spares.pool import NoSpare, SparePool, SpareState
from worker.agent.task_process import CONTROL, REPORT, STDERR, STDOUT, TaskProcess
from worker.wire.protocol import TaskLaunch

#: How long anything here may take before the test fails (nothing waits this long when all is well).
DEADLINE_S = 20.0


@dataclass
class Finished:
    stdout: bytes
    stderr: bytes
    report: list[dict[str, Any]]
    status: int

    @property
    def exit_code(self) -> int:
        return os.waitstatus_to_exitcode(self.status)


class Run:
    """A started task read through the pipes the agent holds: raw bytes per stream, then its
    exit (it is our child; we reap it)."""

    def __init__(self, pid: int, read_ends: dict[str, int], on_reaped: Callable[[int], None]) -> None:
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)  # our unreaped child: surely this process
        self.data = {name: bytearray() for name in read_ends}
        self._on_reaped = on_reaped
        self._selector = selectors.DefaultSelector()
        self._open: dict[int, str] = {}
        for name, fd in read_ends.items():
            os.set_blocking(fd, False)
            self._open[fd] = name
            self._selector.register(fd, selectors.EVENT_READ)
        self.status: int | None = None

    def _pump(self, timeout: float) -> None:
        for key, _ in self._selector.select(timeout):
            fd = int(key.fd)
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if chunk:
                self.data[self._open[fd]] += chunk
            else:
                self._selector.unregister(fd)
                os.close(fd)
                del self._open[fd]

    def wait_for(self, stream: str, needle: bytes, timeout: float = DEADLINE_S) -> float:
        """Read until ``needle`` appears on ``stream``; the time it did (``time.monotonic``)."""
        deadline = time.monotonic() + timeout
        while needle not in self.data[stream]:
            left = deadline - time.monotonic()
            assert left > 0 and self._open, (
                f"{needle!r} never came on {stream}: {bytes(self.data[stream])[-2000:]!r}")
            self._pump(left)
        return time.monotonic()

    def signal(self, sig: signal.Signals) -> None:
        signal.pidfd_send_signal(self.pidfd, sig)

    def finish(self, timeout: float = DEADLINE_S) -> Finished:
        """Everything it writes until its pipes close, and its exit status."""
        deadline = time.monotonic() + timeout
        while self._open and time.monotonic() < deadline:
            self._pump(deadline - time.monotonic())
        poller = select.poll()
        poller.register(self.pidfd, select.POLLIN)
        exited = poller.poll(max(deadline - time.monotonic(), 0) * 1000)
        if not exited:
            self.kill()
            raise AssertionError(f"task {self.pid} did not end within {timeout}s")
        self._reap()
        assert self.status is not None
        reports = [json.loads(line) for line in bytes(self.data[REPORT]).splitlines()]
        return Finished(bytes(self.data[STDOUT]), bytes(self.data[STDERR]), reports, self.status)

    def _reap(self) -> None:
        if self.status is None:
            _, status = os.waitpid(self.pid, 0)
            self.status = status
            self._on_reaped(status)
        for fd in list(self._open):
            self._selector.unregister(fd)
            os.close(fd)
        self._open.clear()
        with contextlib.suppress(OSError):
            os.close(self.pidfd)

    def kill(self) -> None:
        """SIGKILL it and reap it, if it is not reaped yet (safe to call more than once)."""
        if self.status is None:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            self._reap()


def start_cold(task: TaskLaunch) -> Run:
    """The task as the agent starts it today: ``TaskProcess.start``."""
    process = TaskProcess(task)
    process.start()
    assert process.pid is not None
    read_ends = {pipe.stream: fd for fd, pipe in process.fds.items()}
    process.fds.clear()  # the Run reads and closes them now
    return Run(process.pid, read_ends, process.mark_exited)


def wait_settled(pool: SparePool, selector: selectors.BaseSelector, task: str,
                 timeout: float = DEADLINE_S) -> SpareState:
    """Drive the pool as the agent's loop does until the spare of ``task`` is ready or failed."""
    deadline = time.monotonic() + timeout
    while True:
        spare = pool.spares.get(task)
        assert spare is not None, f"no spare for {task}"
        if spare.state is not SpareState.STARTING:
            return spare.state
        left = deadline - time.monotonic()
        assert left > 0, f"the spare of {task} did not settle within {timeout}s"
        for key, _ in selector.select(left):
            if key.data == "spare":
                pool.on_readable(int(key.fd))


def start_warm(pool: SparePool, selector: selectors.BaseSelector, task: TaskLaunch) -> Run:
    """The task through the ready spare of ``task.task``: take, launch, run."""
    assert wait_settled(pool, selector, task.task) is SpareState.READY
    spare = pool.take(task)
    assert not isinstance(spare, NoSpare), spare.reason
    launched = pool.launch(spare, task)

    def reaped(status: int) -> None:
        launched.popen.returncode = os.waitstatus_to_exitcode(status)

    # the control pipe's end is the agent's to write, not to read (a task process would keep it)
    outputs = {name: fd for name, fd in launched.read_ends.items() if name != CONTROL}
    return Run(launched.pid, outputs, reaped)


@pytest.fixture
def nothing_left() -> Iterator[None]:
    """Every process a test started is gone (and reaped) when it ends."""
    me = psutil.Process()
    before = {child.pid for child in me.children(recursive=True)}
    yield
    left = [child for child in me.children(recursive=True) if child.pid not in before]
    for child in left:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(left, timeout=5)
    for child in left:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child.pid, os.WNOHANG)
    assert not left, f"left behind: {left}"


@pytest.fixture
def pool(nothing_left: None) -> Iterator[tuple[SparePool, selectors.BaseSelector]]:
    selector = selectors.DefaultSelector()
    spares = SparePool(selector)
    try:
        yield spares, selector
    finally:
        spares.close()
        selector.close()
