"""The agent under test (``python -m worker.agent``), driven over its stdin/stdout as the
coordinator drives it: :class:`AgentUnderTest`, tasks from small scripts, and waiting helpers."""

from __future__ import annotations

import contextlib
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psutil

from tests.support.procs import alive, by_pid, wait_until_empty
from tests.support.waiting import wait_until
from worker.wire.protocol import (
    Launch,
    Message,
    ProtocolError,
    TaskLaunch,
    decode_event,
)

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
def agent(launch: Launch | None = None) -> Iterator[AgentUnderTest]:
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
    wait_until(condition, timeout, "condition", poll_s=0.01)


def gone(pids: list[int], timeout: float) -> bool:
    """Whether every one of ``pids`` has ended (a zombie has) within ``timeout``."""
    procs = by_pid(pids)
    return not wait_until_empty(lambda: alive(procs), timeout)


#: A task's child program (its argument: a directory): double-forks a grandchild into a session of
#: its own, then sleeps; both note their pids in the directory (``child``, ``grandchild``).
CHILD = """
import os, sys, time
def note(name):
    path = os.path.join(sys.argv[1], name)
    with open(path + ".tmp", "w") as out:
        out.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
middle = os.fork()
if middle == 0:
    os.setsid()
    if os.fork() == 0:
        note("grandchild")
        time.sleep(600)
    os._exit(0)
os.waitpid(middle, 0)
note("child")
time.sleep(600)
"""
