"""The agent on its own (``python -m worker.agent``), driven over its stdin/stdout like the
coordinator drives it: real processes, real signals."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

from tests.support.procs import alive, by_pid, wait_until_empty
from worker.wire.protocol import (
    DumpStacks,
    Exited,
    Launch,
    Message,
    Output,
    ProtocolError,
    SignalTasks,
    Started,
    TaskLaunch,
    TaskReport,
    Terminate,
    Terminated,
    decode_event,
)
from worker.wire.version import PROTOCOL_VERSION, TFCLUSTER_VERSION

pytestmark = pytest.mark.timeout(60)

M = TypeVar("M", bound=Message)


class AgentUnderTest:
    """``python -m worker.agent`` driven over its pipes, as the coordinator drives it. A reader
    thread decodes each message as it comes and notes when it came; :meth:`pause_reading` makes
    it stop taking the agent's output (a coordinator that stalls), :meth:`resume_reading` resume."""

    def __init__(self, launch: Launch | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "worker.agent"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self.seen: list[tuple[float, Message]] = []  # every message read so far, in order
        self._passed: list[tuple[float, Message]] = []  # read, but not asked for yet
        self._inbox: queue.Queue[tuple[float, Message | str | None]] = queue.Queue()
        self._reading = threading.Event()
        self._reading.set()
        self._stderr = bytearray()
        threading.Thread(target=self._read_messages, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        if launch is not None:
            self.send(launch)

    def send(self, message: Message) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(message.encode())
        self.proc.stdin.flush()

    def close_input(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    @property
    def stderr(self) -> str:
        return self._stderr.decode(errors="replace")

    def next_timed(self, kind: type[M], timeout: float = 20,
                   task: str | None = None) -> tuple[float, M]:
        """The first message of ``kind`` (for ``task``, if given) not taken yet, and when it
        arrived. Messages passed over on the way stay there for later calls."""
        for index, (at, message) in enumerate(self._passed):
            found = _matching(message, kind, task)
            if found is not None:
                del self._passed[index]
                return at, found
        deadline = time.monotonic() + timeout
        while True:
            try:
                at, got = self._inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {kind.__name__} within {timeout}s") from None
            if got is None:
                raise AssertionError(f"agent ended before {kind.__name__}: {self.stderr}")
            if isinstance(got, str):
                raise AssertionError(f"agent wrote a bad message: {got}")
            self.seen.append((at, got))
            found = _matching(got, kind, task)
            if found is not None:
                return at, found
            self._passed.append((at, got))

    def next_of(self, kind: type[M], timeout: float = 20, task: str | None = None) -> M:
        return self.next_timed(kind, timeout, task)[1]

    def kill(self) -> None:
        """Kill the agent and every process below it; safe to call more than once."""
        procs: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            procs = psutil.Process(self.proc.pid).children(recursive=True)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        self.proc.kill()
        self.proc.wait()
        wait_until_empty(lambda: alive(procs), timeout=5)

    def _read_messages(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._reading.wait()
            try:
                message: Message | str = decode_event(line)
            except ProtocolError as exc:
                message = f"{exc}: {line[:200]!r}"
            self._inbox.put((time.time(), message))
        self._inbox.put((time.time(), None))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.extend(line)


def _matching(message: Message, kind: type[M], task: str | None) -> M | None:
    if isinstance(message, kind) and task in (None, getattr(message, "task", None)):
        return message
    return None


@contextlib.contextmanager
def agent(launch: Launch) -> Iterator[AgentUnderTest]:
    under_test = AgentUnderTest(launch)
    try:
        yield under_test
    finally:
        under_test.kill()


def script_task(tmp_path: Path, name: str, code: str) -> TaskLaunch:
    script = tmp_path / f"{name}.py"
    script.write_text(code)
    return TaskLaunch(task=name, argv=[sys.executable, "-m", "worker.runtime.bootstrap", str(script)],
                      env={"PYTHONUNBUFFERED": "1"}, cwd=str(tmp_path))


SLEEP_WITH_CHILD = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    """Wait until ``condition()`` holds (a file appears, a table lists a pid); fail after
    ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"condition not met within {timeout}s"
        time.sleep(0.01)


def gone(pids: list[int], timeout: float) -> bool:
    """Whether every one of ``pids`` has ended (a zombie has) within ``timeout``."""
    procs = by_pid(pids)
    return not wait_until_empty(lambda: alive(procs), timeout)


def test_eof_on_stdin_kills_every_task_tree_and_ends_the_agent(tmp_path: Path) -> None:
    launch = Launch(job="t", attempt=0, tasks=[script_task(tmp_path, "worker:0", SLEEP_WITH_CHILD)])
    with agent(launch) as a:
        started = a.next_of(Started)
        assert isinstance(started, Started)
        tree = [started.pid] + [c.pid for c in psutil.Process(started.pid).children(recursive=True)]
        a.close_input()
        assert a.proc.wait(10) == 0
        assert gone(tree, 5)


def test_a_silent_coordinator_is_taken_as_gone(tmp_path: Path) -> None:
    launch = Launch(job="t", attempt=0, coordinator_timeout_s=1.0,
                    tasks=[script_task(tmp_path, "worker:0", SLEEP_WITH_CHILD)])
    with agent(launch) as a:
        started = a.next_of(Started)
        assert isinstance(started, Started)
        began = time.monotonic()
        exited = a.next_of(Exited)  # stdin stays open, but nothing more is sent
        assert isinstance(exited, Exited) and exited.signal == "SIGTERM"
        assert time.monotonic() - began < 5
        assert a.proc.wait(10) == 0


def test_signal_command_reaches_only_the_named_task(tmp_path: Path) -> None:
    code = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
    launch = Launch(job="t", attempt=0, tasks=[script_task(tmp_path, "worker:0", code),
                                              script_task(tmp_path, "worker:1", code)])
    with agent(launch) as a:
        a.next_of(Started)
        a.next_of(Started)
        a.send(SignalTasks(signal="SIGUSR2", task="worker:1"))
        exited = a.next_of(Exited)
        assert isinstance(exited, Exited)
        assert (exited.task, exited.signal) == ("worker:1", "SIGUSR2")


def test_dump_stacks_writes_python_stacks_to_the_task_stderr(tmp_path: Path) -> None:
    code = ("import time\ndef waiting_here():\n    print('up', flush=True)\n    time.sleep(600)\n"
            "waiting_here()\n")
    launch = Launch(job="t", attempt=0, tasks=[script_task(tmp_path, "worker:0", code)])
    with agent(launch) as a:
        a.next_of(Started)
        a.next_of(TaskReport)  # "ready": the stack-dump handler is installed
        a.next_of(Output)  # "up": inside waiting_here
        a.send(DumpStacks())
        lines: list[str] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any("waiting_here" in x for x in lines):
            lines.append(a.next_of(Output, timeout=deadline - time.monotonic()).line)
        assert any("most recent call first" in x for x in lines)
        assert any("waiting_here" in x for x in lines)


def test_terminate_kills_a_task_that_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    code = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('up', flush=True)\ntime.sleep(600)\n")
    launch = Launch(job="t", attempt=0, tasks=[script_task(tmp_path, "worker:0", code)])
    with agent(launch) as a:
        a.next_of(Started)
        a.next_of(Output)  # "up": SIGTERM is ignored from here on
        began = time.monotonic()
        a.send(Terminate(grace_period_s=0.5))
        exited = a.next_of(Exited)
        assert isinstance(exited, Exited) and exited.signal == "SIGKILL"
        assert 0.4 < time.monotonic() - began < 5
        assert isinstance(a.next_of(Terminated), Terminated)


def test_a_bad_launch_message_is_reported_not_a_traceback() -> None:
    line = json.dumps({"type": "launch", "tfcluster_version": TFCLUSTER_VERSION,
                       "protocol_version": PROTOCOL_VERSION}).encode() + b"\n"  # no job, no tasks
    proc = subprocess.run([sys.executable, "-m", "worker.agent"], input=line,
                          capture_output=True, timeout=30, check=False)
    assert proc.returncode == 2
    assert b'"agent_error"' in proc.stdout and b"bad launch message" in proc.stdout
    assert b"Traceback" not in proc.stderr
