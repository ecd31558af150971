"""One task as the agent sees it: the child process, its three pipes and what it has told us."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from worker import env
from worker.protocol import TaskLaunch

STDOUT, STDERR, REPORT = "stdout", "stderr", "report"
_MAX_LINE_BYTES = 64 * 1024
STDERR_TAIL_LINES = 40


@dataclass
class LineBuffer:
    """Splits a byte stream into decoded lines; a line longer than ``limit`` bytes is cut
    (task output), or never (``limit=None``: protocol commands, which must stay whole)."""

    pending: bytearray = field(default_factory=bytearray)
    limit: int | None = _MAX_LINE_BYTES

    def feed(self, chunk: bytes) -> list[str]:
        self.pending.extend(chunk)
        lines: list[str] = []
        while True:
            cut = self.pending.find(b"\n")
            if cut < 0:
                if self.limit is not None and len(self.pending) >= self.limit:
                    cut = self.limit - 1
                else:
                    return lines
            raw = bytes(self.pending[: cut + 1])
            del self.pending[: cut + 1]
            lines.append(raw.decode("utf-8", "replace").rstrip("\r\n"))

    def flush(self) -> list[str]:
        if not self.pending:
            return []
        text = self.pending.decode("utf-8", "replace").rstrip("\r\n")
        self.pending.clear()
        return [text]


class TaskProcess:
    """Starts one task in its own session and owns the read ends of its stdout, stderr and report
    pipes. The agent reaps it (``os.waitpid``) and calls :meth:`mark_exited`."""

    def __init__(self, launch: TaskLaunch, env_overlay: dict[str, str] | None = None) -> None:
        self.launch = launch
        self.env_overlay = launch.env if env_overlay is None else env_overlay
        self.task = launch.task
        self.pid: int | None = None
        self.fds: dict[int, str] = {}
        self.buffers: dict[str, LineBuffer] = {}
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self.traceback: str | None = None
        self.stack_dumps = False
        self.exit_status: int | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._usage: psutil.Process | None = None

    @property
    def running(self) -> bool:
        return self.pid is not None and self.exit_status is None

    def start(self) -> None:
        """Spawn the task; raises OSError when it cannot be started (no such program, bad cwd)."""
        pipes = {name: os.pipe() for name in (STDOUT, STDERR, REPORT)}
        report_w = pipes[REPORT][1]
        child_env = {**os.environ, **self.env_overlay, env.REPORT_FD: str(report_w)}
        try:
            self._popen = subprocess.Popen(
                self.launch.argv,
                stdin=subprocess.DEVNULL,
                stdout=pipes[STDOUT][1],
                stderr=pipes[STDERR][1],
                pass_fds=(report_w,),
                env=child_env,
                cwd=self.launch.cwd,
                start_new_session=True,
            )
        except BaseException:
            for read_end, write_end in pipes.values():
                os.close(read_end)
                os.close(write_end)
            raise
        self.pid = self._popen.pid
        for name, (read_end, write_end) in pipes.items():
            os.close(write_end)
            os.set_blocking(read_end, False)
            self.fds[read_end] = name
            self.buffers[name] = LineBuffer()

    def read(self, fd: int) -> tuple[str, list[str], bool]:
        """Read what is available on one of the task's pipes: (stream, complete lines, at EOF)."""
        stream = self.fds[fd]
        lines: list[str] = []
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return stream, lines, False
            if not chunk:
                lines.extend(self.buffers[stream].flush())
                return stream, lines, True
            lines.extend(self.buffers[stream].feed(chunk))

    def close_fd(self, fd: int) -> None:
        self.fds.pop(fd, None)
        with contextlib.suppress(OSError):
            os.close(fd)

    def close(self) -> None:
        for fd in list(self.fds):
            self.close_fd(fd)

    def mark_exited(self, status: int) -> None:
        self.exit_status = status
        if self._popen is not None:
            # We reaped it ourselves; keep Popen from waiting on a pid that may be reused.
            self._popen.returncode = os.waitstatus_to_exitcode(status)

    def handle_report(self, line: str, emit: Callable[[str, dict[str, Any]], None]) -> None:
        """Interpret one line the task wrote to its report pipe."""
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            return
        if not isinstance(message, dict):
            return
        kind = message.pop("kind", None)
        if kind == "error":
            self.traceback = str(message.get("traceback", ""))
        elif kind == "ready":
            self.stack_dumps = bool(message.get("stack_dumps"))
        if isinstance(kind, str):
            emit(kind, message)

    def usage(self) -> tuple[float, int] | None:
        """(cpu percent since the last call, rss bytes) of the task's main process."""
        if not self.running or self.pid is None:
            return None
        try:
            if self._usage is None:
                self._usage = psutil.Process(self.pid)
            with self._usage.oneshot():
                return self._usage.cpu_percent(None), self._usage.memory_info().rss
        except psutil.Error:
            return None
